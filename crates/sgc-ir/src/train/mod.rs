//! The training-graph builder: describe the forward pass with typed ops, get the whole
//! training step (forward, backward, SGD update).
