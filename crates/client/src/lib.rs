//! gpuhub-client (being written).
