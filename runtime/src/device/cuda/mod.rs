//! CUDA devices. The backend that runs plans on them comes in its own issue;
//! today the registry only probes the driver ([`probe`]) so that `ggplan
//! devices` lists them and a plan naming one is refused with what was found.

pub mod probe;

pub use probe::{CudaDevice, CudaStatus};
