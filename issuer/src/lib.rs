//! repoch's issuer: enrollment, the protected state store, the observers (over `repoch-sys`) and the typed
//! issuance state machine. Synchronous; the daemon drives it.
#![forbid(unsafe_code)]

pub mod barrier;
pub mod discover;
pub mod enroll;
pub mod fleet;
pub mod issuance;
pub mod keys;
pub mod layout;
pub mod log;
pub mod observe;
pub mod refusal;
/// The storage simulation with crash semantics: only for the tests (`sim` feature, enabled
/// by this crate's own tests), never in a production build.
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod stop;
pub mod storage;
pub mod store;
pub mod world;

pub use layout::Layout;
pub use refusal::Refusal;
