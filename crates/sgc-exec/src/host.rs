//! Host-side tensors: what is bound into an executor and read back out of it.

use half::{bf16, f16};
use sgc_ir::DType;

/// The dtypes a [`HostTensor`] holds.
pub const HOST_DTYPES: &[DType] = &[
    DType::F64,
    DType::F32,
    DType::F16,
    DType::Bf16,
    DType::I64,
    DType::I32,
    DType::Bool,
];

/// Elements of a host tensor.
#[derive(Clone, Debug, PartialEq)]
pub enum HostData {
    F64(Vec<f64>),
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
    I64(Vec<i64>),
    I32(Vec<i32>),
    /// A mask (`eq`'s result, `where`'s condition): one byte per element, 0 or 1.
    Bool(Vec<bool>),
}

/// A dense row-major tensor in host memory.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: HostData,
}

impl HostTensor {
    pub fn f32(shape: Vec<usize>, data: Vec<f32>) -> Self {
        HostTensor {
            shape,
            data: HostData::F32(data),
        }
    }

    pub fn i64(shape: Vec<usize>, data: Vec<i64>) -> Self {
        HostTensor {
            shape,
            data: HostData::I64(data),
        }
    }

    pub fn dtype(&self) -> DType {
        match self.data {
            HostData::F64(_) => DType::F64,
            HostData::F32(_) => DType::F32,
            HostData::F16(_) => DType::F16,
            HostData::Bf16(_) => DType::Bf16,
            HostData::I64(_) => DType::I64,
            HostData::I32(_) => DType::I32,
            HostData::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements held.
    pub fn len(&self) -> usize {
        match &self.data {
            HostData::F64(v) => v.len(),
            HostData::F32(v) => v.len(),
            HostData::F16(v) => v.len(),
            HostData::Bf16(v) => v.len(),
            HostData::I64(v) => v.len(),
            HostData::I32(v) => v.len(),
            HostData::Bool(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The f32 elements, if this is an f32 tensor.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            HostData::F32(v) => Some(v),
            _ => None,
        }
    }

    /// The elements as f32, if this is a floating tensor: widened exactly from f16 and
    /// bf16, rounded from f64.
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        match &self.data {
            HostData::F64(v) => Some(v.iter().map(|&x| x as f32).collect()),
            HostData::F32(v) => Some(v.clone()),
            HostData::F16(v) => Some(v.iter().map(|x| x.to_f32()).collect()),
            HostData::Bf16(v) => Some(v.iter().map(|x| x.to_f32()).collect()),
            _ => None,
        }
    }

    /// `values` in the floating `dtype` (rounded to nearest, ties to even; exact for f64);
    /// `None` for a dtype that is not f64, f32, f16 or bf16.
    pub fn floats(dtype: DType, shape: Vec<usize>, values: &[f32]) -> Option<Self> {
        let data = match dtype {
            DType::F64 => HostData::F64(values.iter().map(|&x| f64::from(x)).collect()),
            DType::F32 => HostData::F32(values.to_vec()),
            DType::F16 => HostData::F16(values.iter().map(|&x| f16::from_f32(x)).collect()),
            DType::Bf16 => HostData::Bf16(values.iter().map(|&x| bf16::from_f32(x)).collect()),
            _ => return None,
        };
        Some(HostTensor { shape, data })
    }

    /// Little-endian bytes of the elements.
    pub fn to_bytes(&self) -> Vec<u8> {
        match &self.data {
            HostData::F64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostData::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostData::Bf16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostData::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostData::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostData::Bool(v) => v.iter().map(|&x| u8::from(x)).collect(),
        }
    }

    /// Decodes little-endian bytes; `None` for a dtype the executor does not hold.
    pub fn from_bytes(dtype: DType, shape: Vec<usize>, bytes: &[u8]) -> Option<Self> {
        let data = match dtype {
            DType::F64 => HostData::F64(
                bytes
                    .chunks_exact(8)
                    .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                    .collect(),
            ),
            DType::F32 => HostData::F32(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            DType::F16 => HostData::F16(
                bytes
                    .chunks_exact(2)
                    .map(|c| f16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
            DType::Bf16 => HostData::Bf16(
                bytes
                    .chunks_exact(2)
                    .map(|c| bf16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
            DType::I32 => HostData::I32(
                bytes
                    .chunks_exact(4)
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            DType::I64 => HostData::I64(
                bytes
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                    .collect(),
            ),
            DType::Bool => HostData::Bool(bytes.iter().map(|&b| b != 0).collect()),
            _ => return None,
        };
        Some(HostTensor { shape, data })
    }

    /// Bitwise equality (NaN payloads and signed zeros included).
    pub fn bits_eq(&self, other: &HostTensor) -> bool {
        self.shape == other.shape && self.to_bytes() == other.to_bytes()
    }
}
