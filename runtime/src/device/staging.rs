//! Uploads at load through a few page-locked staging buffers: the bytes of
//! each weight (pages of a mapped file, read as they are touched) are copied
//! into a staging buffer, and the device copy of each piece is queued at
//! once, so reading the next pieces from the file overlaps the device copies
//! of the last ones. A device's driver copies from page-locked memory
//! without an extra copy of its own and without blocking the caller.
//!
//! The order is in [`upload_staged`], device-neutral; a device supplies its
//! buffers, its queued copies and its waits through [`Stager`]. On the H100
//! host measured it lost to direct copies from a file in the page cache
//! (not broken down; pinning the buffers and the extra host copy are the
//! likely costs), so CUDA devices use it only when asked (`GGPLAN_CUDA_STAGING=1`).
//!
//! Invariants:
//! - a staging buffer is written only after every copy queued from it
//!   before has completed ([`Stager::wait`] after its [`Stager::record`]);
//! - each item's bytes reach `dst..dst + len` exactly once, in pieces that
//!   cover them in order;
//! - [`upload_staged`] returns after every queued copy has completed, so the
//!   sources and the staging buffers may be dropped or reused.

use crate::RuntimeError;

/// Staging buffers and an ordered queue of copies out of them (a device's
/// stream), for [`upload_staged`].
pub trait Stager {
    /// How many staging buffers there are (at least one).
    fn buffers(&self) -> usize;

    /// Bytes in each staging buffer (more than zero).
    fn buffer_bytes(&self) -> usize;

    /// Writes `bytes` into buffer `buffer` from byte `offset`. Only called
    /// after the buffer's last [`Stager::record`] was waited for.
    fn write(&mut self, buffer: usize, offset: usize, bytes: &[u8]);

    /// Queues a copy of `len` bytes from buffer `buffer` at `offset` to the
    /// device address `dst` (returns without waiting for it).
    fn queue_copy(
        &mut self,
        buffer: usize,
        offset: usize,
        len: usize,
        dst: u64,
    ) -> Result<(), RuntimeError>;

    /// Marks the point after every copy queued from `buffer` so far.
    fn record(&mut self, buffer: usize) -> Result<(), RuntimeError>;

    /// Returns once the copies before `buffer`'s last record have completed
    /// (at once when it was never recorded).
    fn wait(&mut self, buffer: usize) -> Result<(), RuntimeError>;
}

/// One write of a load: `bytes` to the device address `dst`.
pub struct Upload<'a> {
    /// Where the bytes go on the device.
    pub dst: u64,
    /// The bytes (a mapped file's pages, or a converted copy).
    pub bytes: &'a [u8],
}

/// Writes every item through `stager`'s buffers in turn (see the module
/// doc), calling `progress` with the bytes of each piece as it is queued.
pub fn upload_staged(
    stager: &mut dyn Stager,
    items: &[Upload<'_>],
    progress: &mut dyn FnMut(u64),
) -> Result<(), RuntimeError> {
    let n = stager.buffers().max(1);
    let cap = stager.buffer_bytes().max(1);
    let mut current = 0;
    let mut filled = 0;
    let mut pending = vec![false; n];
    for item in items {
        let mut done = 0;
        while done < item.bytes.len() {
            if filled == cap {
                // Full: its copies are queued; move to the next buffer once
                // the copies out of it (a round ago) are done.
                stager.record(current)?;
                pending[current] = true;
                current = (current + 1) % n;
                if pending[current] {
                    stager.wait(current)?;
                    pending[current] = false;
                }
                filled = 0;
            }
            let take = (cap - filled).min(item.bytes.len() - done);
            stager.write(current, filled, &item.bytes[done..done + take]);
            stager.queue_copy(current, filled, take, item.dst + done as u64)?;
            filled += take;
            done += take;
            progress(take as u64);
        }
    }
    if filled > 0 {
        stager.record(current)?;
        pending[current] = true;
    }
    for (buffer, &queued) in pending.iter().enumerate() {
        if queued {
            stager.wait(buffer)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! A stager whose copies run on a thread of their own, each after a
    //! random delay and reading its staging buffer only then: a buffer
    //! written again before its copy ran would put the new bytes at the old
    //! destination, which the byte-for-byte comparison catches.

    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc::{Receiver, Sender, channel};
    use std::sync::{Arc, Mutex};
    use std::thread::JoinHandle;
    use std::time::Duration;

    enum Job {
        Copy {
            buffer: usize,
            offset: usize,
            len: usize,
            dst: u64,
        },
        Record {
            done: Sender<()>,
        },
    }

    struct DelayedStager {
        staging: Vec<Arc<Mutex<Vec<u8>>>>,
        device: Arc<Mutex<Vec<u8>>>,
        queue: Option<Sender<Job>>,
        recorded: Vec<Option<Receiver<()>>>,
        worker: Option<JoinHandle<()>>,
        /// Writes into a buffer recorded but not waited for (must stay 0).
        early_writes: usize,
        /// Copies queued, and copies the worker has run.
        queued: usize,
        copied: Arc<AtomicUsize>,
        /// When false, `wait` returns without waiting (the mutant the test
        /// must catch).
        honest_wait: bool,
    }

    impl DelayedStager {
        fn new(buffers: usize, bytes: usize, device: usize, seed: u64, honest: bool) -> Self {
            let staging: Vec<_> = (0..buffers)
                .map(|_| Arc::new(Mutex::new(vec![0u8; bytes])))
                .collect();
            let dev = Arc::new(Mutex::new(vec![0u8; device]));
            let (tx, rx) = channel::<Job>();
            let (bufs, target) = (staging.clone(), Arc::clone(&dev));
            let copied = Arc::new(AtomicUsize::new(0));
            let counter = Arc::clone(&copied);
            let worker = std::thread::spawn(move || {
                let mut state = seed | 1;
                for job in rx {
                    // xorshift: a delay of 0-199 µs before each job.
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    std::thread::sleep(Duration::from_micros(state % 200));
                    match job {
                        Job::Copy {
                            buffer,
                            offset,
                            len,
                            dst,
                        } => {
                            let src = bufs[buffer].lock().unwrap();
                            let mut d = target.lock().unwrap();
                            let dst = dst as usize;
                            d[dst..dst + len].copy_from_slice(&src[offset..offset + len]);
                            counter.fetch_add(1, Ordering::SeqCst);
                        }
                        Job::Record { done } => {
                            let _ = done.send(());
                        }
                    }
                }
            });
            DelayedStager {
                recorded: (0..buffers).map(|_| None).collect(),
                staging,
                device: dev,
                queue: Some(tx),
                worker: Some(worker),
                early_writes: 0,
                queued: 0,
                copied,
                honest_wait: honest,
            }
        }

        /// Drains the queue and returns the device bytes.
        fn finish(mut self) -> (Vec<u8>, usize) {
            drop(self.queue.take());
            self.worker.take().unwrap().join().unwrap();
            let bytes = self.device.lock().unwrap().clone();
            (bytes, self.early_writes)
        }
    }

    impl Stager for DelayedStager {
        fn buffers(&self) -> usize {
            self.staging.len()
        }

        fn buffer_bytes(&self) -> usize {
            self.staging[0].lock().unwrap().len()
        }

        fn write(&mut self, buffer: usize, offset: usize, bytes: &[u8]) {
            if self.recorded[buffer].is_some() {
                self.early_writes += 1;
            }
            let mut b = self.staging[buffer].lock().unwrap();
            b[offset..offset + bytes.len()].copy_from_slice(bytes);
        }

        fn queue_copy(
            &mut self,
            buffer: usize,
            offset: usize,
            len: usize,
            dst: u64,
        ) -> Result<(), RuntimeError> {
            self.queued += 1;
            let job = Job::Copy {
                buffer,
                offset,
                len,
                dst,
            };
            self.queue.as_ref().unwrap().send(job).unwrap();
            Ok(())
        }

        fn record(&mut self, buffer: usize) -> Result<(), RuntimeError> {
            let (done, rx) = channel();
            self.queue
                .as_ref()
                .unwrap()
                .send(Job::Record { done })
                .unwrap();
            self.recorded[buffer] = Some(rx);
            Ok(())
        }

        fn wait(&mut self, buffer: usize) -> Result<(), RuntimeError> {
            if let Some(rx) = self.recorded[buffer].take()
                && self.honest_wait
            {
                rx.recv().unwrap();
            }
            Ok(())
        }
    }

    /// Items of odd sizes (empty, smaller than a buffer, several buffers
    /// long) laid out one after another on the device, with their bytes.
    fn items(seed: u64) -> (Vec<(u64, Vec<u8>)>, usize) {
        let sizes = [1usize, 0, 37, 64, 300, 5, 129, 0, 1000, 63, 2, 777];
        let mut at = 0u64;
        let mut out = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let bytes: Vec<u8> = (0..n)
                .map(|j| (j as u64 * 31 + i as u64 * 7 + seed) as u8)
                .collect();
            // A gap between items: bytes outside every item stay zero.
            out.push((at + 3, bytes));
            at += n as u64 + 3;
        }
        (out, at as usize + 3)
    }

    fn upload(buffers: usize, bytes: usize, seed: u64, honest: bool) -> (Vec<u8>, Vec<u8>, usize) {
        let (items, device_len) = items(seed);
        let mut stager = DelayedStager::new(buffers, bytes, device_len, seed, honest);
        let uploads: Vec<Upload<'_>> = items
            .iter()
            .map(|(dst, b)| Upload {
                dst: *dst,
                bytes: b,
            })
            .collect();
        let mut progressed = 0u64;
        upload_staged(&mut stager, &uploads, &mut |n| progressed += n).unwrap();
        if honest {
            // Returned only after every copy it queued ran.
            assert_eq!(stager.copied.load(Ordering::SeqCst), stager.queued);
        }
        let total: usize = items.iter().map(|(_, b)| b.len()).sum();
        assert_eq!(progressed, total as u64);
        let mut want = vec![0u8; device_len];
        for (dst, b) in &items {
            want[*dst as usize..*dst as usize + b.len()].copy_from_slice(b);
        }
        let (got, early) = stager.finish();
        (got, want, early)
    }

    #[test]
    fn every_byte_arrives_with_copies_delayed_at_random() {
        for (buffers, bytes) in [(1, 64), (2, 64), (3, 100), (2, 7), (4, 4096)] {
            for seed in 1..6 {
                let (got, want, early) = upload(buffers, bytes, seed, true);
                assert_eq!(early, 0, "{buffers} x {bytes} B, seed {seed}");
                assert!(got == want, "{buffers} x {bytes} B, seed {seed}");
            }
        }
    }

    #[test]
    fn a_wait_that_does_not_wait_is_caught() {
        // The same upload with `wait` returning at once: some staging buffer
        // is refilled before its delayed copies ran, and bytes land wrong.
        let caught = (1..20).any(|seed| {
            let (got, want, _) = upload(2, 64, seed, false);
            got != want
        });
        assert!(caught, "no run of the broken wait corrupted a byte");
    }

    #[test]
    fn nothing_is_queued_for_empty_items() {
        let mut stager = DelayedStager::new(2, 16, 8, 1, true);
        let empty = [Upload { dst: 0, bytes: &[] }];
        upload_staged(&mut stager, &empty, &mut |_| panic!("no progress")).unwrap();
        assert!(stager.recorded.iter().all(Option::is_none));
        assert_eq!(stager.finish().0, vec![0u8; 8]);
    }
}
