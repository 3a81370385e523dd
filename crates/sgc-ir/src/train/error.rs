//! Errors of the training-graph builder. Each names the op or tensor at fault.

use crate::error::GraphError;
use thiserror::Error;

/// Why a training graph could not be built.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum TrainError {
    /// Operand shapes (or attributes) that the op cannot take.
    #[error("op `{op}`: {message}")]
    Shape { op: String, message: String },
    /// An operand of the wrong element type.
    #[error("op `{op}`: operand `{tensor}` has dtype {found}, expected {expected}")]
    DType {
        op: String,
        tensor: String,
        found: String,
        expected: String,
    },
    #[error("tensor name `{0}` is used twice: give every tensor (and op output) its own name")]
    DuplicateTensor(String),
    #[error("op name `{0}` is used twice: give every op its own name")]
    DuplicateOp(String),
    #[error("loss `{0}` is not the output of a cross_entropy op: the backward pass starts from the cross-entropy gradient")]
    LossNotCrossEntropy(String),
    #[error("op `{0}`: a cross_entropy output other than the loss feeds the loss; only one cross-entropy loss per step is supported")]
    SecondLoss(String),
    #[error("param `{0}` does not reach the loss, so it gets no gradient and no update: remove it or use it")]
    UnusedParam(String),
    #[error("learning rate {0} is not a finite number: give `with_lr` a finite value")]
    BadLearningRate(f64),
    /// The assembled graph broke a rule of the format (a builder bug or a name clash).
    #[error("the built graph is invalid: {0}")]
    Graph(#[from] GraphError),
}

impl TrainError {
    pub(crate) fn shape(op: &str, message: impl Into<String>) -> Self {
        TrainError::Shape {
            op: op.to_string(),
            message: message.into(),
        }
    }
}
