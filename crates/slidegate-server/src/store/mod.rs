//! The store the service decides with, chosen by `--store`.

pub mod backend;
