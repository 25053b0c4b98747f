//! Consumer groups: the group coordinator as a replicated state machine
//! ([`coordinator`]), the records it writes to `__consumer_offsets` ([`record`]), and
//! the pure partition assignors it runs ([`assignor`]).

pub mod assignor;
pub mod coordinator;
pub mod record;
