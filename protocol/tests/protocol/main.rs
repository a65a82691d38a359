//! repoch-protocol's tests: one binary, one module per area.
mod cddl;
mod chain;
mod common;
mod corpus;
mod deadline;
mod golden;
mod props;
mod reasons;
mod strict;
