//! gpuhub-docker (being written).
