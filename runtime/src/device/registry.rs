//! The registry: the devices this machine has, found at start-up, and the
//! device a plan's entry opens.
//!
//! Found: `cpu` (every core this process may use), its NUMA nodes
//! (`numa0`, ... from /sys: a plan for `numa0` runs on a single-node host
//! too), and core groups (`cpu0`, `cpu1`: the cores cut in two, as the
//! `cpu0+cpu1` target asks).
//! The host's description ([`HostInfo`]: CPU model, SIMD, memory) is read
//! on demand ([`Registry::host`]). CUDA devices are probed on demand ([`Registry::probe_cuda`]: the
//! driver is only loaded when asked); their backend comes in its own issue, so
//! a plan naming one is refused by name, saying what the probe found.
//!
//! Invariant: opening a plan's devices allocates nothing and starts no thread
//! until every device of the plan was found; a missing one is an error that
//! lists what was found.

use super::Device;
use super::DeviceInfo;
use super::backend::{DeviceBackend, OpenCtx, Opened, OpenedAll};
use super::cpu::FastKernels;
use super::cpu::{CpuDevice, allowed_cores, cpu_caps};
use super::cuda::CudaStatus;
use super::host::{HostInfo, host_info, meminfo_bytes};
use crate::RuntimeError;
use crate::device::cpu::ThreadPool;
use crate::device::cpu::pool::share;
use ir::plan::{DeviceKind, Plan, PlanDevice};
use std::sync::Arc;

/// What the registry found.
pub struct Registry {
    /// Every device found, `cpu` first.
    pub devices: Vec<DeviceInfo>,
    /// The host's cores this process may use.
    pub cores: Vec<usize>,
}

fn cpu_info(name: String, description: String, cores: Vec<usize>) -> DeviceInfo {
    let total = meminfo("MemTotal").unwrap_or(0);
    DeviceInfo {
        name,
        description,
        memory_total: total,
        memory_free: meminfo("MemAvailable").unwrap_or(total),
        alignment: 64,
        max_buffer_bytes: total.max(1),
        cores,
        caps: cpu_caps(),
    }
}

/// A `/proc/meminfo` field in bytes.
fn meminfo(key: &str) -> Option<u64> {
    meminfo_bytes(&std::fs::read_to_string("/proc/meminfo").ok()?, key)
}

/// NUMA nodes and their cores from /sys (empty without NUMA information).
fn numa_nodes() -> Vec<(u32, Vec<usize>)> {
    let Ok(dir) = std::fs::read_dir("/sys/devices/system/node") else {
        return Vec::new();
    };
    let mut nodes: Vec<(u32, Vec<usize>)> = dir
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let node: u32 = name.strip_prefix("node")?.parse().ok()?;
            let path = format!("/sys/devices/system/node/{name}/cpulist");
            Some((
                node,
                parse_cpulist(std::fs::read_to_string(path).ok()?.trim()),
            ))
        })
        .collect();
    nodes.sort();
    nodes
}

/// `0-3,8,10-11` -> [0, 1, 2, 3, 8, 10, 11].
pub fn parse_cpulist(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(lo), Ok(hi)) = (lo.parse::<usize>(), hi.parse::<usize>()) {
            out.extend(lo..=hi.min(lo + 4096));
        }
    }
    out
}

/// The cores of group `group` of `groups` (equal shares, in order); with
/// more groups than cores, groups share cores (core `group % cores`).
pub fn group_cores(cores: &[usize], group: u32, groups: u32) -> Vec<usize> {
    let (g, n) = (group as usize, groups.max(1) as usize);
    if cores.is_empty() {
        return Vec::new();
    }
    if n > cores.len() {
        return vec![cores[g % cores.len()]];
    }
    cores[share(cores.len(), g, n)].to_vec()
}

impl Registry {
    /// Enumerates this machine's devices.
    pub fn enumerate() -> Registry {
        let cores = allowed_cores();
        let mut devices = vec![cpu_info(
            "cpu".to_string(),
            format!("the host, {} cores", cores.len()),
            cores.clone(),
        )];
        let nodes = numa_nodes();
        if !nodes.is_empty() {
            for (node, node_cores) in nodes {
                let mine: Vec<usize> = node_cores
                    .into_iter()
                    .filter(|c| cores.contains(c))
                    .collect();
                let what = format!("NUMA node {node}, {} cores", mine.len());
                devices.push(cpu_info(format!("numa{node}"), what, mine));
            }
        }
        if cores.len() > 1 {
            for group in 0..2 {
                let mine = group_cores(&cores, group, 2);
                let what = format!("core group {group} of 2: cores {mine:?}");
                devices.push(cpu_info(format!("cpu{group}"), what, mine));
            }
        }
        Registry { devices, cores }
    }

    /// The host CPU and memory, read now (only callers that describe the
    /// host pay for reading /proc/cpuinfo: loading a plan does not).
    pub fn host(&self) -> HostInfo {
        host_info()
    }

    /// Probes the CUDA driver (loads it: only when a caller needs to know).
    pub fn probe_cuda(&self) -> CudaStatus {
        super::cuda::probe::probe()
    }

    /// Opens the plan's devices: one pool per device with its share of
    /// `threads` (the host's `threads` for `cpu`, a group's part of them for
    /// a core group, at least one). Returns the devices and the warnings to
    /// show (groups that share cores).
    pub fn open(
        &self,
        plan_devices: &[PlanDevice],
        threads: usize,
        shared_pool: Option<&Arc<ThreadPool>>,
        kernels: &Arc<FastKernels>,
    ) -> Result<(Vec<Arc<CpuDevice>>, Vec<String>), RuntimeError> {
        let found = || {
            let names: Vec<&str> = self.devices.iter().map(|d| d.name.as_str()).collect();
            names.join(", ")
        };
        let mut warnings = Vec::new();
        let mut plans = Vec::new();
        let node_devices = plan_devices
            .iter()
            .filter(|d| matches!(d.kind, DeviceKind::CpuNode { .. }))
            .count();
        let mut nodes_seen = 0;
        for dev in plan_devices {
            match dev.kind {
                // Opened by the runtime on its GPU (`cuda/`), not here.
                DeviceKind::Cuda { .. } => continue,
                // Opened by the runtime on its server (`rpc/`), not here.
                DeviceKind::Remote { .. } => continue,
                DeviceKind::Cpu => plans.push((dev, self.cores.clone(), threads)),
                DeviceKind::CpuCores { group, groups } => {
                    if groups as usize > self.cores.len() {
                        warnings.push(format!(
                            "{}: {groups} core groups on {} cores: groups share cores",
                            dev.name,
                            self.cores.len()
                        ));
                    }
                    let mine = group_cores(&self.cores, group, groups);
                    let n = share(threads, group as usize, groups as usize).len().max(1);
                    plans.push((dev, mine, n));
                }
                DeviceKind::CpuNode { node } => {
                    let nodes = numa_nodes();
                    let mine: Vec<usize> = nodes
                        .iter()
                        .find(|(n, _)| *n == node)
                        .map(|(_, cores)| {
                            cores
                                .iter()
                                .copied()
                                .filter(|c| self.cores.contains(c))
                                .collect()
                        })
                        .unwrap_or_default();
                    if mine.is_empty() {
                        let listed: Vec<String> =
                            nodes.iter().map(|(n, _)| format!("numa{n}")).collect();
                        return Err(RuntimeError::NoDevice {
                            device: dev.name.clone(),
                            kind: format!("NUMA node {node}"),
                            why: format!(
                                "this host's NUMA nodes with cores this process may use: {};                                  devices found: {}",
                                if listed.is_empty() {
                                    "none listed in /sys/devices/system/node".to_string()
                                } else {
                                    listed.join(", ")
                                },
                                found()
                            ),
                        });
                    }
                    let n = share(threads, nodes_seen, node_devices).len().max(1);
                    nodes_seen += 1;
                    plans.push((dev, mine, n));
                }
            }
        }
        warnings.dedup();
        let single = plans.len() == 1;
        let devices = plans
            .into_iter()
            .map(|(dev, cores, n)| {
                let what = format!("{} threads on cores {cores:?}", n);
                let mut info = cpu_info(dev.name.clone(), what, cores.clone());
                info.alignment = dev.alignment;
                info.max_buffer_bytes = dev.max_buffer_bytes.min(info.max_buffer_bytes);
                let node = match dev.kind {
                    DeviceKind::CpuNode { node } => Some(node),
                    _ => None,
                };
                let pool = match shared_pool {
                    Some(p) if single && node.is_none() => Arc::clone(p),
                    // A lone device uses every core unpinned, as before groups.
                    _ if single && node.is_none() => Arc::new(ThreadPool::new(n)),
                    _ => Arc::new(ThreadPool::pinned(n, cores)),
                };
                let device = CpuDevice::new(info, pool, Arc::clone(kernels));
                Arc::new(match node {
                    Some(node) => device.bound_to_node(node),
                    None => device,
                })
            })
            .collect();
        Ok((devices, warnings))
    }
}

/// The host's CPU devices: the whole host, core groups and NUMA nodes.
pub struct CpuBackend;

impl DeviceBackend for CpuBackend {
    fn name(&self) -> &str {
        "cpu"
    }

    fn open(&self, plan: &Plan, ctx: &OpenCtx<'_>) -> Result<Opened, RuntimeError> {
        let (opened, warnings) = Registry::enumerate().open(
            &plan.devices,
            ctx.options.threads,
            ctx.options.pool.as_ref(),
            ctx.kernels,
        )?;
        let mut opened = opened.into_iter();
        let devices = (plan.devices.iter())
            .map(|d| host_kind(d.kind).then(|| opened.next().map(|c| c as Arc<dyn Device>))?)
            .collect();
        Ok((devices, warnings))
    }
}

/// True for the device kinds [`Registry::open`] opens (host memory).
fn host_kind(kind: DeviceKind) -> bool {
    matches!(
        kind,
        DeviceKind::Cpu | DeviceKind::CpuCores { .. } | DeviceKind::CpuNode { .. }
    )
}

/// The backends every load consults, in order.
pub fn builtin_backends() -> Vec<Arc<dyn DeviceBackend>> {
    vec![
        Arc::new(CpuBackend),
        Arc::new(super::cuda::CudaBackend),
        Arc::new(super::rpc::RpcBackend),
    ]
}

/// Opens every device of `plan`: each by the first of `ctx.options.backends`
/// then [`builtin_backends`] that serves it. Returns the devices by plan
/// device id and the warnings to show; refuses a device no backend opens.
pub fn open_devices(plan: &Plan, ctx: &OpenCtx<'_>) -> Result<OpenedAll, RuntimeError> {
    let mut devices: Vec<Option<Arc<dyn Device>>> = vec![None; plan.devices.len()];
    let mut warnings = Vec::new();
    let backends = (ctx.options.backends.iter().cloned()).chain(builtin_backends());
    for backend in backends {
        if devices.iter().all(Option::is_some) {
            break;
        }
        let (opened, said) = backend.open(plan, ctx)?;
        warnings.extend(said);
        for (slot, device) in devices.iter_mut().zip(opened) {
            if slot.is_none() {
                *slot = device;
            }
        }
    }
    let devices = (devices.into_iter().zip(&plan.devices))
        .map(|(d, dev)| {
            d.ok_or_else(|| RuntimeError::NoDevice {
                device: dev.name.clone(),
                kind: dev.kind.to_string(),
                why: "no device backend of this runtime opens it".to_string(),
            })
        })
        .collect::<Result<_, _>>()?;
    Ok((devices, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists_and_groups() {
        assert_eq!(parse_cpulist("0-3,8,10-11"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpulist(""), Vec::<usize>::new());
        assert_eq!(group_cores(&[0, 1, 2, 3], 1, 2), vec![2, 3]);
        assert_eq!(group_cores(&[0, 1], 3, 4), vec![1]); // shared cores
        assert_eq!(group_cores(&[4, 5, 6], 0, 2), vec![4, 5]);
    }

    #[test]
    fn the_host_is_found_and_gpus_are_left_to_the_cuda_backend() {
        let r = Registry::enumerate();
        assert_eq!(r.devices[0].name, "cpu");
        assert!(!r.devices[0].cores.is_empty());
        let cuda = PlanDevice {
            name: "cuda0".to_string(),
            kind: DeviceKind::Cuda { ordinal: 0 },
            memory_bytes: 1 << 30,
            alignment: 256,
            max_buffer_bytes: 1 << 30,
        };
        let kernels = Arc::new(FastKernels::new(crate::Precision::Fast).unwrap());
        let (opened, _) = (r.open(&[cuda], 1, None, &kernels)).expect("nothing to open here");
        assert!(opened.is_empty(), "a GPU is not a CPU device");
    }
}
