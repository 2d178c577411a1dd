#![allow(dead_code)]
pub mod boundary;
pub mod burst;
pub mod contention;
pub mod cost;
pub mod exactness;
pub mod leases;
pub mod options;
pub mod redis_log;
pub mod redis_server;
pub mod reference;
pub mod scenarios;
pub mod standin_sentinel;
