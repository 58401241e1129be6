//! The seams between the runtime and the world. Everything that reads time, touches a disk or
//! opens a socket goes through here, so the simulator can substitute its own world.

pub mod clock;
pub mod entropy;
pub mod storage;
