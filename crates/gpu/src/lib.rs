//! gpuhub-gpu (being written).
