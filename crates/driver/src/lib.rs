//! gpuhub-driver (being written).
