//! The shared scan cache: one registry scan per repository per interval however many watches
//! use it (`index`), and when each tag appeared (`appearances`).

pub mod appearances;
pub mod index;
