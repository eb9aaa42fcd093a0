//! Tests of targets: presets, their files, parsing, validation, support queries.

use super::*;
use ir::{DType, Op};
use std::path::PathBuf;

fn targets_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/targets")
}

fn preset(name: &str) -> Target {
    Target::preset(name).expect("a preset")
}

fn problems(t: &Target) -> Vec<String> {
    match t.validate() {
        Err(Error::InvalidTarget { problems, .. }) => problems,
        Err(e) => panic!("unexpected error {e}"),
        Ok(()) => Vec::new(),
    }
}

/// The presets are valid, and each file of `examples/targets/` holds exactly
/// its preset, byte for byte. `GGPLAN_BLESS=1` rewrites the files instead.
#[test]
fn preset_files_match_presets() {
    let bless = std::env::var_os("GGPLAN_BLESS").is_some_and(|v| v == "1");
    for name in Target::PRESETS {
        let t = preset(name);
        assert_eq!(problems(&t), Vec::<String>::new(), "{name}");
        let path = targets_dir().join(format!("{name}.ron"));
        if bless {
            std::fs::write(&path, t.to_ron()).expect("write the preset file");
        }
        let text = std::fs::read_to_string(&path).expect("the preset file exists");
        assert_eq!(
            text,
            t.to_ron(),
            "{} drifted from its preset",
            path.display()
        );
        let parsed = Target::parse(&path.display().to_string()).expect("parses");
        assert_eq!(parsed, t, "{name}");
        assert_eq!(Target::parse(name).expect("a preset name"), t);
    }
}

/// `cpu+2gpu-small`: `cpu+cuda0+cuda1` with 24 MiB GPUs whose buffers are at
/// most 16 MiB, for `--fit` tests. The llama2l example's 57.3 MiB of F32
/// weights (12.5 MiB per block, 15.6 MiB for each of the head and the token
/// embedding) fit on neither GPU, nor on both, so `--fit` must spill to the CPU;
/// 24 MiB arenas must be chunked under the 16 MiB buffer limit.
#[test]
fn small_memory_target_file_is_valid_and_canonical() {
    let path = targets_dir().join("cpu+2gpu-small.ron");
    let t = Target::read(&path).expect("valid");
    let names: Vec<&str> = t.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["cuda0", "cuda1", "cpu"]);
    for gpu in &t.devices[..2] {
        assert_eq!(
            (gpu.memory_bytes, gpu.max_buffer_bytes),
            (24 << 20, 16 << 20)
        );
    }
    let text = std::fs::read_to_string(&path).expect("read");
    assert_eq!(t.to_ron(), text, "{} is not canonical", path.display());
}

#[test]
fn device_order_and_lookups() {
    let t = preset("cpu+cuda0+cuda1");
    assert_eq!(t.device_id("cuda1"), Some(DeviceId(1)));
    assert_eq!(
        t.cpu(),
        Some(DeviceId(2)),
        "the CPU is the last, fallback device"
    );
    assert_eq!(t.first_accelerator(), Some(DeviceId(0)));
    assert_eq!(t.device("cpu").map(|d| d.alignment), Some(64));
    assert_eq!(t.device("nope"), None);
    let link = t.link("cuda1", "cuda0").expect("symmetric lookup");
    assert_eq!((link.from.as_str(), link.to.as_str()), ("cuda0", "cuda1"));
    assert_eq!(t.link("cpu", "cuda1"), t.link("cuda1", "cpu"));
    assert!(t.link("cpu", "cpu").is_none());
    assert_eq!(preset("cuda0").cpu(), None);
    assert_eq!(preset("cpu").first_accelerator(), None);
}

#[test]
fn support_queries() {
    let t = preset("cpu+cuda0");
    let (gpu, cpu) = (DeviceId(0), DeviceId(1));
    for q in [DType::Q8_0, DType::Q4_1, DType::Q4_K, DType::Q6_K] {
        assert!(
            t.supports(gpu, &Op::MulMat, q),
            "quantized mul_mat on cuda0: {q}"
        );
        assert!(
            t.supports(gpu, &Op::GetRows, q),
            "quantized get_rows on cuda0: {q}"
        );
    }
    assert!(t.supports(gpu, &Op::RmsNorm { eps: 1e-5 }, DType::BF16));
    assert!(
        t.supports(gpu, &Op::Reshape, DType::Q4_0),
        "views run no kernel"
    );
    // Declared unsupported on cuda0: quantized src0 outside mul_mat/get_rows/views,
    // and I32 src0 outside views.
    assert!(!t.supports(gpu, &Op::Cpy, DType::Q8_0));
    assert!(!t.supports(gpu, &Op::Add, DType::Q4_0));
    assert!(!t.supports(gpu, &Op::GetRows, DType::I32));
    assert!(!t.supports(gpu, &Op::Cont, DType::I32));
    // The CPU runs everything; an id out of range runs nothing.
    for kind in OpKind::ALL {
        for d in DType::ALL {
            assert!(t.devices[cpu.index()].supports_kind(kind, d), "{kind} {d}");
        }
    }
    assert!(!t.supports(DeviceId(9), &Op::Add, DType::F32));
}

#[test]
fn validation_lists_every_problem() {
    let mut t = preset("cpu+cuda0+cuda1");
    t.devices[0].alignment = 96;
    t.devices[0].max_buffer_bytes = t.devices[0].memory_bytes + 1;
    t.devices[0].throughput.memory_gbps = 0.0;
    t.devices[1].kind = DeviceKind::Cuda { ordinal: 0 };
    t.devices[2].host_visible = false;
    let no_ops = OpSupport {
        ops: OpSet::Only(vec![]),
        src0: DTypeSet::All,
    };
    t.devices[2].supports.push(no_ops);
    t.devices.push(presets::cpu()); // a second CPU, and a second 'cpu'
    t.links[0].bandwidth_gbps = -1.0;
    t.links[1].to = "tpu0".into();
    t.links.push(presets::pcie("cpu", "cpu"));
    assert_eq!(
        problems(&t),
        [
            "device 0 'cuda0': alignment 96 is not a power of two",
            "device 0 'cuda0': max_buffer_bytes 80000000001 exceeds memory_bytes 80000000000",
            "device 0 'cuda0': throughput memory_gbps is 0; it must be finite and > 0",
            "device 1 'cuda1': CUDA ordinal 0 is also device 'cuda0'",
            "device 2 'cpu': a CPU device must be host_visible",
            "device 2 'cpu': support entry 1 lists no ops",
            "device 3 'cpu': the name is also used by device 2",
            "2 CPU devices (cpu, cpu); a target has one host CPU, or CpuCores groups",
            "link 0 'cuda0' <-> 'cpu': bandwidth_gbps is -1; it must be finite and > 0",
            "link 1 'cuda1' <-> 'tpu0': no device is called 'tpu0'",
            "link 3 'cpu' <-> 'cpu': a link joins two different devices",
            "no link joins 'cuda1' and 'cpu'; every pair of devices needs one",
        ]
    );
    let msg = t.validate().expect_err("invalid").to_string();
    assert!(
        msg.starts_with("target 'cpu+cuda0+cuda1' is invalid (12 problems):\n  - device 0"),
        "{msg}"
    );
}

#[test]
fn validation_wants_devices_and_a_link_per_pair() {
    let empty = Target {
        name: "none".into(),
        devices: vec![],
        links: vec![],
    };
    assert_eq!(
        problems(&empty),
        ["it has no devices; a target needs at least one"]
    );
    let mut t = preset("cpu+cuda0+cuda1");
    t.links.retain(|l| !l.joins("cuda0", "cuda1"));
    t.links.push(presets::pcie("cpu", "cuda1"));
    assert_eq!(
        problems(&t),
        [
            "link 2 'cpu' <-> 'cuda1': link 1 already joins these devices (links serve both directions)",
            "no link joins 'cuda0' and 'cuda1'; every pair of devices needs one",
        ]
    );
}

#[test]
fn parse_errors_say_where() {
    let bad = "(\n  name: \"x\",\n  devices: [],\n  linkz: [],\n)\n";
    match Target::from_ron(bad, "bad.ron") {
        Err(Error::TargetSyntax {
            path,
            line,
            col,
            message,
        }) => {
            assert_eq!((path.as_str(), line), ("bad.ron", 4), "{message} at {col}");
            assert!(message.contains("linkz"), "{message}");
        }
        other => panic!("expected a syntax error, got {other:?}"),
    }
    let op = preset("cpu")
        .to_ron()
        .replace("ops: All", "ops: Only([matmul])");
    let e = Target::from_ron(&op, "op.ron")
        .expect_err("unknown op")
        .to_string();
    assert!(e.starts_with("op.ron:") && e.contains("matmul"), "{e}");
    let e = Target::parse("no-such-target")
        .expect_err("unknown")
        .to_string();
    assert!(e.contains("cpu, cuda0, cpu+cuda0, cpu+cuda0+cuda1"), "{e}");
    let invalid = preset("cpu")
        .to_ron()
        .replace("alignment: 64", "alignment: 0");
    let e = Target::from_ron(&invalid, "a.ron")
        .expect_err("invalid")
        .to_string();
    assert!(e.contains("alignment 0 is not a power of two"), "{e}");
}

#[test]
fn core_groups_are_groups_zero_to_n_each_once() {
    for name in ["cpu0+cpu1", "cpu0+cpu1+cpu2+cpu3"] {
        assert!(problems(&preset(name)).is_empty(), "{name}");
    }
    let mut t = preset("cpu0+cpu1");
    t.devices[1].kind = DeviceKind::CpuCores {
        group: 0,
        groups: 2,
    };
    assert_eq!(
        problems(&t),
        ["core groups (cpu0, cpu1) must be groups 0..2 of 2, each once"]
    );
    let mut t = preset("cpu0+cpu1");
    t.devices[1].kind = DeviceKind::Cpu;
    assert_eq!(
        problems(&t),
        ["CPU devices (cpu0, cpu1) mix the whole host (Cpu) with core groups (CpuCores)"]
    );
}

#[test]
fn numa_nodes_are_distinct_and_alone_among_cpu_devices() {
    for name in ["numa0", "numa0+numa1"] {
        assert!(problems(&preset(name)).is_empty(), "{name}");
    }
    let mut t = preset("numa0+numa1");
    t.devices[1].kind = DeviceKind::CpuNode { node: 0 };
    assert_eq!(
        problems(&t),
        ["CPU devices (numa0, numa1) name one NUMA node twice"]
    );
    let mut t = preset("numa0+numa1");
    t.devices[1].kind = DeviceKind::CpuCores {
        group: 1,
        groups: 2,
    };
    assert_eq!(
        problems(&t),
        ["CPU devices (numa0, numa1) mix NUMA nodes (CpuNode) with other CPU devices"]
    );
}
