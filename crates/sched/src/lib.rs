//! gpuhub-sched (being written).
