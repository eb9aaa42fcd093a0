use super::*;
use ir::plan::{DeviceId, PLAN_FORMAT_VERSION, Placement, Stats};
use ir::{GluKind, Layout, Role, RopeMode, RopeParams};

/// `enum ggml_op` of the server's ggml.h, in order (GGML_OP_ prefix dropped).
const GGML_OPS: [&str; 101] = [
    "NONE",
    "DUP",
    "ADD",
    "ADD_ID",
    "ADD1",
    "ACC",
    "SUB",
    "MUL",
    "DIV",
    "SQR",
    "SQRT",
    "LOG",
    "SIN",
    "COS",
    "SUM",
    "SUM_ROWS",
    "CUMSUM",
    "MEAN",
    "ARGMAX",
    "COUNT_EQUAL",
    "REPEAT",
    "REPEAT_BACK",
    "CONCAT",
    "SILU_BACK",
    "NORM",
    "RMS_NORM",
    "RMS_NORM_BACK",
    "GROUP_NORM",
    "L2_NORM",
    "MUL_MAT",
    "MUL_MAT_ID",
    "OUT_PROD",
    "SCALE",
    "SET",
    "CPY",
    "CONT",
    "RESHAPE",
    "VIEW",
    "PERMUTE",
    "TRANSPOSE",
    "GET_ROWS",
    "GET_ROWS_BACK",
    "SET_ROWS",
    "DIAG",
    "DIAG_MASK_INF",
    "DIAG_MASK_ZERO",
    "SOFT_MAX",
    "SOFT_MAX_BACK",
    "ROPE",
    "ROPE_BACK",
    "CLAMP",
    "CONV_TRANSPOSE_1D",
    "IM2COL",
    "IM2COL_BACK",
    "IM2COL_3D",
    "COL2IM_1D",
    "CONV_2D",
    "CONV_3D",
    "CONV_2D_DW",
    "CONV_TRANSPOSE_2D",
    "POOL_1D",
    "POOL_2D",
    "POOL_2D_BACK",
    "UPSCALE",
    "PAD",
    "PAD_REFLECT_1D",
    "ROLL",
    "ARANGE",
    "TIMESTEP_EMBEDDING",
    "ARGSORT",
    "TOP_K",
    "LEAKY_RELU",
    "TRI",
    "FILL",
    "FLASH_ATTN_EXT",
    "FLASH_ATTN_BACK",
    "SSM_CONV",
    "SSM_SCAN",
    "WIN_PART",
    "WIN_UNPART",
    "GET_REL_POS",
    "ADD_REL_POS",
    "RWKV_WKV6",
    "GATED_LINEAR_ATTN",
    "RWKV_WKV7",
    "SOLVE_TRI",
    "GATED_DELTA_NET",
    "LIGHTNING_INDEXER",
    "DSV4_HC_COMB",
    "DSV4_HC_PRE",
    "DSV4_HC_POST",
    "UNARY",
    "MAP_CUSTOM1",
    "MAP_CUSTOM2",
    "MAP_CUSTOM3",
    "CUSTOM",
    "CROSS_ENTROPY_LOSS",
    "CROSS_ENTROPY_LOSS_BACK",
    "OPT_STEP_ADAMW",
    "OPT_STEP_SGD",
    "GLU",
];

fn position(names: &[&str], name: &str) -> u32 {
    names.iter().position(|n| *n == name).expect(name) as u32
}

#[test]
fn op_numbers_match_the_servers_enum() {
    assert_eq!(GGML_OPS.len() as u32, GGML_OP_COUNT);
    let ours = [
        ("NONE", GGML_OP_NONE),
        ("ADD", GGML_OP_ADD),
        ("SUB", GGML_OP_SUB),
        ("MUL", GGML_OP_MUL),
        ("DIV", GGML_OP_DIV),
        ("SQR", GGML_OP_SQR),
        ("SQRT", GGML_OP_SQRT),
        ("SUM_ROWS", GGML_OP_SUM_ROWS),
        ("MEAN", GGML_OP_MEAN),
        ("ARGMAX", GGML_OP_ARGMAX),
        ("CONCAT", GGML_OP_CONCAT),
        ("NORM", GGML_OP_NORM),
        ("RMS_NORM", GGML_OP_RMS_NORM),
        ("MUL_MAT", GGML_OP_MUL_MAT),
        ("MUL_MAT_ID", GGML_OP_MUL_MAT_ID),
        ("CLAMP", GGML_OP_CLAMP),
        ("ARGSORT", GGML_OP_ARGSORT),
        ("SCALE", GGML_OP_SCALE),
        ("CPY", GGML_OP_CPY),
        ("CONT", GGML_OP_CONT),
        ("GET_ROWS", GGML_OP_GET_ROWS),
        ("SET_ROWS", GGML_OP_SET_ROWS),
        ("DIAG_MASK_INF", GGML_OP_DIAG_MASK_INF),
        ("SOFT_MAX", GGML_OP_SOFT_MAX),
        ("ROPE", GGML_OP_ROPE),
        ("UNARY", GGML_OP_UNARY),
        ("GLU", GGML_OP_GLU),
    ];
    for (name, number) in ours {
        assert_eq!(position(&GGML_OPS, name), number, "GGML_OP_{name}");
    }
    // The values counted by hand from ggml.h.
    assert_eq!(
        (GGML_OP_MUL_MAT, GGML_OP_ROPE, GGML_OP_SOFT_MAX),
        (29, 48, 46)
    );
    assert_eq!((GGML_OP_UNARY, GGML_OP_GLU), (91, 100));

    let unary = [
        "ABS",
        "SGN",
        "NEG",
        "STEP",
        "TANH",
        "ELU",
        "RELU",
        "SIGMOID",
        "GELU",
        "GELU_QUICK",
        "SILU",
        "HARDSWISH",
        "HARDSIGMOID",
        "EXP",
        "EXPM1",
        "SOFTPLUS",
        "GELU_ERF",
    ];
    for (name, n) in [
        ("TANH", GGML_UNARY_OP_TANH),
        ("RELU", GGML_UNARY_OP_RELU),
        ("GELU", GGML_UNARY_OP_GELU),
        ("SILU", GGML_UNARY_OP_SILU),
        ("GELU_ERF", GGML_UNARY_OP_GELU_ERF),
    ] {
        assert_eq!(position(&unary, name) as i32, n, "GGML_UNARY_OP_{name}");
    }
    let glu = ["REGLU", "GEGLU", "SWIGLU", "SWIGLU_OAI", "GEGLU_ERF"];
    for (name, n) in [
        ("GEGLU", GGML_GLU_OP_GEGLU),
        ("SWIGLU", GGML_GLU_OP_SWIGLU),
        ("GEGLU_ERF", GGML_GLU_OP_GEGLU_ERF),
    ] {
        assert_eq!(position(&glu, name) as i32, n, "GGML_GLU_OP_{name}");
    }
}

fn tensor(name: &str, dtype: DType, ne: [i64; 4]) -> PlanTensor {
    let nb = Layout::contiguous(dtype, ne).map_or([4, 4, 4, 4], |l| l.nb);
    PlanTensor {
        name: name.to_string(),
        dtype,
        ne,
        nb,
        role: Role::Intermediate,
        device: DeviceId(0),
        placement: Placement::Arena {
            arena: 0,
            offset: 0,
        },
        copy_of: None,
        init: None,
        shard: None,
        part: None,
        reason: String::new(),
    }
}

fn plan(tensors: Vec<PlanTensor>) -> Plan {
    Plan {
        format_version: PLAN_FORMAT_VERSION,
        compiler_version: "test".to_string(),
        graph_name: "g".to_string(),
        graph_hash: "0000000000000000".to_string(),
        target_name: "rpc".to_string(),
        options: vec![],
        devices: vec![],
        n_graph_tensors: tensors.len() as u32,
        tensors,
        arenas: vec![],
        kernels: vec![],
        streams: vec![],
        n_events: 0,
        splits: vec![],
        stats: Stats {
            devices: vec![],
            n_splits: 0,
            links: vec![],
            fused_nodes: 0,
            estimated_us: 0.0,
            split_us: vec![],
        },
    }
}

/// Tensor `t` lives at 0x1000 + 0x100 t in buffer 7.
fn locate(t: u32) -> Option<RemoteAddr> {
    Some(RemoteAddr {
        as_f32: false,
        buffer: 7,
        data: 0x1000 + 0x100 * u64::from(t),
    })
}

fn bits(x: f32) -> i32 {
    x.to_bits() as i32
}

#[test]
fn rope_parameters_are_ggmls_rope_ext_layout() {
    let x = tensor("q", DType::F32, [8, 2, 3, 1]);
    let pos = tensor("pos", DType::I32, [3, 1, 1, 1]);
    let op = Op::Rope(RopeParams {
        mode: RopeMode::Neox,
        n_dims: 6,
        freq_base: 10000.0,
        freq_scale: 0.5,
        n_ctx_orig: 4096,
        ext_factor: 1.0,
        attn_factor: 1.25,
        beta_fast: 32.0,
        beta_slow: 1.0,
    });
    let (number, p) = node_op(&op, &[&x, &pos]).unwrap();
    assert_eq!(number, GGML_OP_ROPE);
    let want = [
        0,
        6,
        2,
        0,
        4096,
        0x461c_4000, // 10000.0
        0x3f00_0000, // 0.5
        0x3f80_0000, // 1.0
        0x3fa0_0000, // 1.25
        0x4200_0000, // 32.0
        0x3f80_0000, // 1.0
        0,
        0,
        0,
        0,
        0,
    ];
    assert_eq!(p, want);
    assert_eq!(want[5], bits(10000.0));
    let normal = Op::Rope(RopeParams::plain(RopeMode::Normal, 8, 500000.0));
    let (_, p) = node_op(&normal, &[&x, &pos]).unwrap();
    assert_eq!((p[1], p[2], p[5]), (8, 0, bits(500000.0)));
    // Llama 3's frequency factors travel as src[2], F32 only.
    let factors = tensor("rope_freqs.weight", DType::F32, [4, 1, 1, 1]);
    assert_eq!(node_op(&normal, &[&x, &pos, &factors]).unwrap().1, p);
    let half = tensor("rope_freqs.weight", DType::F16, [4, 1, 1, 1]);
    let err = node_op(&normal, &[&x, &pos, &half]).unwrap_err();
    assert!(
        format!("{err}").contains("frequency factors (src2)"),
        "{err}"
    );
}

#[test]
fn soft_max_scale_and_glu_parameters() {
    let kq = tensor("kq", DType::F32, [4, 3, 2, 1]);
    let mask = tensor("mask", DType::F16, [4, 3, 1, 1]);
    let op = Op::SoftMax {
        scale: 0.125,
        max_bias: 8.0,
    };
    let (number, p) = node_op(&op, &[&kq, &mask]).unwrap();
    assert_eq!(number, GGML_OP_SOFT_MAX);
    assert_eq!(p[..3], [0x3e00_0000, 0x4100_0000, 0]);
    assert_eq!(node_op(&op, &[&kq]).unwrap().1[0], bits(0.125));

    let (number, p) = node_op(
        &Op::Scale {
            scale: -2.0,
            bias: 0.5,
        },
        &[&kq],
    )
    .unwrap();
    assert_eq!((number, p[0], p[1]), (GGML_OP_SCALE, bits(-2.0), bits(0.5)));

    let glu = |swapped| Op::Glu {
        kind: GluKind::GeGluErf,
        swapped,
    };
    let (number, p) = node_op(&glu(true), &[&kq]).unwrap();
    assert_eq!(
        (number, p[0], p[1]),
        (GGML_OP_GLU, GGML_GLU_OP_GEGLU_ERF, 1)
    );
    // Two sources: ggml_glu_split never sets swapped.
    assert_eq!(node_op(&glu(true), &[&kq, &kq]).unwrap().1[1], 0);
    let (number, p) = node_op(&Op::Silu, &[&kq]).unwrap();
    assert_eq!((number, p[0]), (GGML_OP_UNARY, GGML_UNARY_OP_SILU));
    let (number, p) = node_op(&Op::RmsNorm { eps: 1e-6 }, &[&kq]).unwrap();
    assert_eq!((number, p[0]), (GGML_OP_RMS_NORM, bits(1e-6)));
    let (number, p) = node_op(&Op::DiagMaskInf { n_past: 5 }, &[&kq]).unwrap();
    assert_eq!((number, p[0]), (GGML_OP_DIAG_MASK_INF, 5));
    let (number, p) = node_op(&Op::Concat { dim: 2 }, &[&kq, &kq]).unwrap();
    assert_eq!((number, p[0]), (GGML_OP_CONCAT, 2));
    assert_eq!(
        node_op(&Op::Transpose, &[&kq]).unwrap(),
        (GGML_OP_NONE, [0; 16])
    );
}

/// x, w -> y = mul_mat(w, x) -> r = reshape(y) -> z = silu(r).
fn small_plan() -> Plan {
    plan(vec![
        tensor("x", DType::F32, [4, 2, 1, 1]),
        tensor("w", DType::Q8_0, [32, 3, 1, 1]),
        tensor("w32", DType::F32, [4, 3, 1, 1]),
        tensor("y", DType::F32, [3, 2, 1, 1]),
        tensor("r", DType::F32, [6, 1, 1, 1]),
        tensor("z", DType::F32, [6, 1, 1, 1]),
    ])
}

#[test]
fn a_payload_holds_every_record_once_with_distinct_ids() {
    let p = small_plan();
    let s0 = step_records(&p, 0, &Op::MulMat, 3, &[2, 0], &locate).unwrap();
    let s1 = step_records(&p, 1, &Op::Reshape, 4, &[3], &locate).unwrap();
    let s2 = step_records(&p, 2, &Op::Silu, 5, &[4], &locate).unwrap();
    assert!(s1.is_empty() && s1.leafs.is_empty());
    let payload = graph_payload(3, &[&s0, &s1, &s2]);

    let u32_at = |at: usize| u32::from_le_bytes(payload[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(payload[at..at + 8].try_into().unwrap());
    assert_eq!(u32_at(0), 3, "device");
    let n_nodes = u32_at(4) as usize;
    assert_eq!(n_nodes, 2, "the reshape sends no node");
    let nodes: Vec<u64> = (0..n_nodes).map(|i| u64_at(8 + 8 * i)).collect();
    let at = 8 + 8 * n_nodes;
    let n_tensors = u32_at(at) as usize;
    assert_eq!(n_tensors, 2 + 3, "two nodes, three leafs");
    assert_eq!(payload.len(), at + 4 + n_tensors * RpcTensor::BYTES);
    let records: Vec<RpcTensor> = (0..n_tensors)
        .map(|i| RpcTensor::decode(&payload[at + 4 + i * RpcTensor::BYTES..]).unwrap())
        .collect();

    let ids: HashSet<u64> = records.iter().map(|r| r.id).collect();
    assert_eq!(ids.len(), n_tensors, "ids are distinct");
    assert!(!ids.contains(&0));
    for r in &records {
        for &s in r.src.iter().filter(|&&s| s != 0) {
            assert!(
                ids.contains(&s),
                "{} names source {s}, not in the payload",
                r.name
            );
        }
        assert_eq!((r.view_src, r.buffer), (0, 7));
    }
    let node = |id: u64| records.iter().find(|r| r.id == id).unwrap();
    let (mm, silu) = (node(nodes[0]), node(nodes[1]));
    assert_eq!((mm.op, mm.name.as_str()), (GGML_OP_MUL_MAT, "y"));
    assert_eq!(mm.flags, GGML_TENSOR_FLAG_OUTPUT | GGML_TENSOR_FLAG_COMPUTE);
    assert_eq!((mm.ne, mm.nb), ([3, 2, 1, 1], [4, 12, 24, 24]));
    assert_eq!((mm.data, mm.use_count), (0x1300, 0));
    let src0 = node(mm.src[0]);
    assert_eq!((src0.name.as_str(), src0.op, src0.use_count), ("w32", 0, 1));
    assert_eq!(node(mm.src[1]).name, "x");
    assert_eq!(mm.src[2], 0);
    assert_eq!(
        (silu.op, silu.op_params[0]),
        (GGML_OP_UNARY, GGML_UNARY_OP_SILU)
    );
    // The reshape's result is read at its own address, as a leaf.
    let r = node(silu.src[0]);
    assert_eq!((r.name.as_str(), r.data, r.ne), ("r", 0x1400, [6, 1, 1, 1]));
    // The same plan tensor as a node and then as a leaf gets two ids.
    let y_leaf = step_records(&p, 9, &Op::Cont, 5, &[3], &locate).unwrap();
    assert_ne!(y_leaf.leafs[0].id, mm.id);
    assert_eq!(y_leaf.leafs[0].data, mm.data);
    assert_eq!(graph_payload(0, &[&s1]).len(), 12, "views send nothing");
}

#[test]
fn set_rows_sends_ggmls_source_order_and_writes_its_destination() {
    let mut cache = tensor("cache", DType::F16, [8, 16, 1, 1]);
    cache.role = Role::State;
    let mut written = cache.clone();
    written.name = "cache.set".to_string();
    written.placement = Placement::View { of: 0, offset: 0 };
    let p = plan(vec![
        cache,
        tensor("k", DType::F32, [8, 3, 1, 1]),
        tensor("rows", DType::I32, [3, 1, 1, 1]),
        written,
    ]);
    let at = |t: u32| {
        // The result aliases the cache.
        locate(if t == 3 { 0 } else { t })
    };
    let g = step_records(&p, 4, &Op::SetRows, 3, &[0, 1, 2], &at).unwrap();
    let node = g.node.as_ref().unwrap();
    assert_eq!(node.op, GGML_OP_SET_ROWS);
    let name = |id: u64| &g.leafs.iter().find(|l| l.id == id).unwrap().name;
    assert_eq!(
        [name(node.src[0]), name(node.src[1]), name(node.src[2])],
        ["k", "rows", "cache"]
    );
    assert_eq!(node.data, 0x1000);
    // A result elsewhere than its destination is refused.
    let e = step_records(&p, 4, &Op::SetRows, 3, &[0, 1, 2], &locate).unwrap_err();
    assert!(e.reason.contains("destination's address"), "{e}");
}

#[test]
fn collectives_and_unfit_tensors_are_refused() {
    let p = small_plan();
    let reduce = Op::AllReduceSum {
        group: 0,
        rank: 0,
        ranks: 2,
    };
    let e = step_records(&p, 0, &reduce, 5, &[4, 3], &locate).unwrap_err();
    assert_eq!(e.op, "all_reduce_sum");
    let gather = Op::AllGather {
        dim: 0,
        group: 1,
        rank: 1,
        ranks: 2,
    };
    let x = tensor("x", DType::F32, [4, 2, 1, 1]);
    assert!(node_op(&gather, &[&x, &x]).is_err());

    // Extents and strides beyond a record's u32.
    let mut big = tensor("big", DType::F32, [1 << 33, 1, 1, 1]);
    big.nb = [4, 1 << 35, 1 << 35, 1 << 35];
    let out = tensor("out", DType::F32, [1 << 33, 1, 1, 1]);
    let p = plan(vec![big, out]);
    let e = step_records(&p, 0, &Op::Sqr, 1, &[0], &locate).unwrap_err();
    assert!(e.reason.contains("extent 8589934592"), "{e}");
    let mut strided = tensor("s", DType::F32, [4, 2, 1, 1]);
    strided.nb = [4, 1 << 32, 1 << 33, 1 << 33];
    let p = plan(vec![strided, tensor("o", DType::F32, [4, 2, 1, 1])]);
    let e = step_records(&p, 0, &Op::Sqr, 1, &[0], &locate).unwrap_err();
    assert!(e.reason.contains("u32"), "{e}");

    // A tensor the server does not hold, and indices outside the plan.
    let p = small_plan();
    let nowhere = |_| None;
    assert!(step_records(&p, 0, &Op::Sqr, 5, &[4], &nowhere).is_err());
    assert!(step_records(&p, 0, &Op::Sqr, 99, &[4], &locate).is_err());
    assert!(step_records(&p, 0, &Op::Sqr, 5, &[4, 4], &locate).is_err());
    assert!(step_records(&p, usize::MAX, &Op::Sqr, 5, &[4], &locate).is_err());
}

#[test]
fn dtypes_and_layouts_the_cpu_backend_lacks_are_refused() {
    let f32m = tensor("a", DType::F32, [32, 4, 1, 1]);
    let f16m = tensor("h", DType::F16, [32, 4, 1, 1]);
    let bf16m = tensor("b", DType::BF16, [32, 4, 1, 1]);
    let q = tensor("q", DType::Q4_0, [32, 4, 1, 1]);
    let refused = |op: Op, srcs: &[&PlanTensor]| node_op(&op, srcs).is_err();
    assert!(refused(
        Op::Scale {
            scale: 2.0,
            bias: 0.0
        },
        &[&f16m]
    ));
    assert!(refused(
        Op::SoftMax {
            scale: 1.0,
            max_bias: 0.0
        },
        &[&f16m]
    ));
    assert!(refused(Op::RmsNorm { eps: 1e-5 }, &[&bf16m]));
    assert!(refused(Op::RmsNorm { eps: -1.0 }, &[&f32m]));
    assert!(refused(Op::MulMat, &[&q, &f16m]));
    assert!(refused(Op::MulMat, &[&f16m, &bf16m]));
    assert!(!refused(Op::MulMat, &[&q, &f32m]));
    assert!(!refused(Op::MulMat, &[&f32m, &f16m]));
    assert!(refused(Op::Add, &[&f32m, &f16m]));
    assert!(!refused(Op::Add, &[&f16m, &f32m]));
    assert!(refused(Op::DiagMaskInf { n_past: -1 }, &[&f32m]));
    assert!(refused(
        Op::Rope(RopeParams::plain(RopeMode::Normal, 32, 1e4)),
        &[&bf16m, &tensor("p", DType::I32, [1, 1, 1, 1])]
    ));
    assert!(refused(Op::SetRows, &[&f16m, &bf16m, &f32m]));
    // A permuted source (elements strided within a row).
    let mut t = f32m.clone();
    t.ne = [4, 32, 1, 1];
    t.nb = [128, 4, 512, 512];
    assert!(refused(Op::Silu, &[&t]));
    assert!(!refused(Op::Cont, &[&t]));
    assert!(!refused(Op::Norm { eps: 0.0 }, &[&t]));
    // glu rows must follow each other by nb1 alone.
    let mut gaps = tensor("g", DType::F32, [4, 2, 3, 1]);
    gaps.nb = [4, 16, 64, 192];
    assert!(refused(
        Op::Glu {
            kind: GluKind::SwiGlu,
            swapped: false
        },
        &[&gaps]
    ));
}

#[test]
fn quantized_copies_are_checked_against_the_result() {
    // A strided quantized source packed into another shape is refused;
    // into its own shape (row by row) it is fine.
    let mut src = tensor("w", DType::Q8_0, [32, 2, 2, 1]);
    src.nb = [34, 68, 272, 544];
    let p = plan(vec![
        src,
        tensor("flat", DType::Q8_0, [64, 2, 1, 1]),
        tensor("same", DType::Q8_0, [32, 2, 2, 1]),
    ]);
    assert!(step_records(&p, 0, &Op::Cont, 1, &[0], &locate).is_err());
    assert!(step_records(&p, 0, &Op::Cont, 2, &[0], &locate).is_ok());
    // Copying f32 rows into a q8_0 tensor: rows must be whole blocks.
    let mut dest = tensor("kq", DType::Q8_0, [64, 1, 1, 1]);
    dest.role = Role::State;
    let p = plan(vec![
        tensor("v", DType::F32, [16, 4, 1, 1]),
        dest.clone(),
        tensor("v32", DType::F32, [32, 2, 1, 1]),
    ]);
    let mut written = dest;
    written.name = "kq.cpy".to_string();
    let mut p2 = p;
    p2.tensors.push(written);
    // The result aliases its destination.
    let at = |t: u32| locate(if t == 3 { 1 } else { t });
    assert!(step_records(&p2, 0, &Op::Cpy, 3, &[0, 1], &at).is_err());
    let g = step_records(&p2, 0, &Op::Cpy, 3, &[2, 1], &at).unwrap();
    assert_eq!(g.node.unwrap().src[1], g.leafs[1].id);
}

#[test]
fn mixture_of_experts_ops_are_ggmls() {
    let experts = tensor("exps", DType::Q4_K, [256, 24, 8, 1]);
    let x = tensor("x", DType::F32, [256, 1, 5, 1]);
    let ids = tensor("ids", DType::I32, [2, 5, 1, 1]);
    let (number, p) = node_op(&Op::MulMatId, &[&experts, &x, &ids]).unwrap();
    assert_eq!((number, p), (GGML_OP_MUL_MAT_ID, [0; 16]));
    let f_ids = tensor("ids", DType::F32, [2, 5, 1, 1]);
    let err = node_op(&Op::MulMatId, &[&experts, &x, &f_ids]).unwrap_err();
    assert!(format!("{err}").contains("expert ids (src2)"), "{err}");

    let probs = tensor("probs", DType::F32, [8, 5, 1, 1]);
    let (number, p) = node_op(&Op::Argsort { descending: true }, &[&probs]).unwrap();
    assert_eq!((number, p[0]), (GGML_OP_ARGSORT, 1));
    let (_, p) = node_op(&Op::Argsort { descending: false }, &[&probs]).unwrap();
    assert_eq!(p[0], 0);

    let clamp = Op::Clamp {
        min: 6.1035156e-5,
        max: f32::INFINITY,
    };
    let (number, p) = node_op(&clamp, &[&probs]).unwrap();
    assert_eq!(
        (number, p[0], p[1]),
        (GGML_OP_CLAMP, 0x3880_0000, 0x7f80_0000)
    );
}
