//! Random valid graphs for property tests and the differential fuzz target:
//! one generator, driven either by a seeded [`TestRng`] or by a fuzzer's
//! bytes (anything that implements [`Choose`]).

use crate::TestRng;
use ir::{DType, Graph, GraphBuilder, Op, TensorId};

/// A source of choices: `below(n)` is in `0..n` (`n >= 1`).
pub trait Choose {
    /// A choice in `0..n`.
    fn below(&mut self, n: usize) -> usize;
}

impl Choose for TestRng {
    fn below(&mut self, n: usize) -> usize {
        TestRng::below(self, n)
    }
}

/// Choices read from a fuzzer's bytes; once they run out every choice is 0,
/// so every input gives a graph.
impl Choose for arbitrary::Unstructured<'_> {
    fn below(&mut self, n: usize) -> usize {
        self.choose_index(n).unwrap_or(0)
    }
}

/// A random graph of `[d, rows]` activations: unary, binary (also with a
/// broadcast bias), mul_mat with per-layer weights, norms, soft_max, layout
/// round trips through reshape/permute/transpose/cont, and glu over a concat.
pub fn random_graph(rng: &mut impl Choose, case: usize) -> Graph {
    let mut b = GraphBuilder::new(format!("random{case}"));
    let d = [32i64, 64][rng.below(2)];
    let rows = 1 + rng.below(24) as i64;
    let x = b.input("x", DType::F32, [d, rows, 1, 1]).unwrap();
    let mut pool: Vec<TensorId> = vec![x];
    let n_ops = 3 + rng.below(14);
    for i in 0..n_ops {
        let layer = i / 3;
        let a = pool[rng.below(pool.len())];
        let name = |s: &str| format!("n{i}.{s}");
        let out = match rng.below(8) {
            0 => {
                let op = [
                    Op::Silu,
                    Op::Relu,
                    Op::Tanh,
                    Op::Sqr,
                    Op::Scale {
                        scale: 0.5,
                        bias: 0.1,
                    },
                ][rng.below(5)];
                b.unary(name("unary"), op, a).unwrap()
            }
            1 => {
                let other = if rng.below(2) == 0 {
                    pool[rng.below(pool.len())]
                } else {
                    b.weight(format!("blk.{layer}.bias{i}"), DType::F32, [d, 1, 1, 1])
                        .unwrap()
                };
                let op = [Op::Add, Op::Mul, Op::Sub][rng.below(3)];
                b.node(name("binary"), op, &[a, other], None).unwrap()
            }
            2 => {
                let w = b
                    .weight(format!("blk.{layer}.w{i}"), DType::F32, [d, d, 1, 1])
                    .unwrap();
                b.mul_mat(name("mm"), w, a).unwrap()
            }
            3 => {
                if rng.below(2) == 0 {
                    b.rms_norm(name("rms"), a, 1e-5).unwrap()
                } else {
                    b.norm(name("norm"), a, 1e-5).unwrap()
                }
            }
            4 => b.soft_max(name("softmax"), a, None, 0.25, 0.0).unwrap(),
            5 => {
                let r = b.reshape(name("r3"), a, [d / 2, 2, rows, 1]).unwrap();
                let p = b.permute(name("perm"), r, [1, 0, 2, 3]).unwrap();
                let c = b.cont(name("cont"), p).unwrap();
                b.reshape(name("r2"), c, [d, rows, 1, 1]).unwrap()
            }
            6 => {
                let t = b.transpose(name("t"), a).unwrap();
                let c = b.cont(name("tc"), t).unwrap();
                let t2 = b.transpose(name("t2"), c).unwrap();
                b.cont(name("tc2"), t2).unwrap()
            }
            _ => {
                let other = pool[rng.below(pool.len())];
                let cat = b.concat(name("cat"), a, other, 0).unwrap();
                b.glu(name("glu"), ir::GluKind::SwiGlu, cat, rng.below(2) == 0)
                    .unwrap()
            }
        };
        pool.push(out);
    }
    let last = *pool.last().unwrap();
    if last != x {
        b.mark_output(last).unwrap();
    }
    let extra = pool[rng.below(pool.len())];
    if extra != x && b.tensor(extra).view.is_none() {
        b.mark_output(extra).unwrap();
    }
    b.finish().unwrap()
}
