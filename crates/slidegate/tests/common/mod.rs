#![allow(dead_code)]
pub mod redis_log;
pub mod redis_server;
pub mod reference;
