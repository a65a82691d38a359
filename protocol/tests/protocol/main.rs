//! repoch-protocol's tests: one binary, one module per area.
mod batch;
mod bounded;
mod cddl;
mod chain;
mod common;
mod corpus;
mod deadline;
mod events;
mod fields;
mod framing;
mod golden;
mod lineage;
mod props;
mod reasons;
mod signing;
mod strict;
mod values;
