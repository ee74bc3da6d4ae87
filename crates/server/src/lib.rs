//! gpuhub-server (being written).
