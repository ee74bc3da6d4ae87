//! gpuhub-sim (being written).
