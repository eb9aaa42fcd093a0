use super::*;
use crate::device::{Device, DeviceInfo, TensorBytes};
use crate::executor::event::Event;
use concurrency::Abort;
use std::sync::Arc;

fn device() -> CpuDevice {
    let info = DeviceInfo {
        name: "cpu1".to_string(),
        description: "a test group".to_string(),
        memory_total: 1 << 20,
        memory_free: 1 << 20,
        alignment: 64,
        max_buffer_bytes: 1 << 20,
        cores: vec![0],
        caps: cpu_caps(),
    };
    let kernels = Arc::new(FastKernels::new(crate::Precision::Fast).unwrap());
    CpuDevice::new(info, Arc::new(ThreadPool::new(1)), kernels)
}

#[test]
fn tensors_are_written_and_read_at_an_offset_within_their_bytes() {
    let dev = device();
    let buffer = dev.alloc(256, 64, "test").expect("allocated");
    // The tensor: 16 bytes from byte 32 of the buffer.
    // SAFETY: 32..48 lies inside the 256-byte buffer, alive for the test.
    let tensor = unsafe { TensorBytes::new(buffer.as_ptr().add(32), 16) };
    dev.set_tensor(tensor, 4, &[1, 2, 3, 4]).expect("in bounds");
    let mut out = [0u8; 8];
    dev.get_tensor(tensor, 2, &mut out).expect("in bounds");
    assert_eq!(out, [0, 0, 1, 2, 3, 4, 0, 0]);
    let err = dev
        .set_tensor(tensor, 14, &[9; 4])
        .expect_err("past the end");
    let msg = err.to_string();
    assert!(
        msg.contains("cpu1") && msg.contains("offset 14") && msg.contains("16-byte"),
        "{msg}"
    );
    assert!(
        dev.get_tensor(tensor, usize::MAX, &mut out).is_err(),
        "offset overflow"
    );
    // Nothing was written by the refused call, and the buffer's other bytes are untouched.
    dev.get_tensor(tensor, 8, &mut out).expect("in bounds");
    assert_eq!(out, [0; 8]);
    // SAFETY: the whole buffer, alive for the test.
    let whole = unsafe { TensorBytes::new(buffer.as_ptr(), 256) };
    let mut all = [0u8; 256];
    dev.get_tensor(whole, 0, &mut all).expect("in bounds");
    assert_eq!(all.iter().map(|&b| u32::from(b)).sum::<u32>(), 10);
}

#[test]
fn async_tensor_io_records_its_event_once_the_bytes_landed() {
    let dev = device();
    let buffer = dev.alloc(64, 64, "test").expect("allocated");
    // SAFETY: the whole buffer, alive for the test.
    let tensor = unsafe { TensorBytes::new(buffer.as_ptr(), 64) };
    let (written, read) = (Event::default(), Event::default());
    dev.set_tensor_async(tensor, 60, &[7, 7, 7, 7], &written)
        .expect("in bounds");
    written.wait(&Abort::default()).expect("recorded");
    let mut out = [0u8; 4];
    dev.get_tensor_async(tensor, 60, &mut out, &read)
        .expect("in bounds");
    read.wait(&Abort::default()).expect("recorded");
    dev.synchronize();
    assert_eq!(out, [7; 4]);
    let never = Event::default();
    assert!(dev.set_tensor_async(tensor, 61, &[0; 4], &never).is_err());
    assert!(!never.is_done(), "a refused write records nothing");
}
