//! gpuhub-store (being written).
