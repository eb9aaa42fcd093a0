//! Binary labelling by s-t minimum cut: each variable takes its *first* or
//! its *second* choice, minimising a sum of cost terms.
//!
//! Construction (Stone 1977, and the graph-cut energy constructions of
//! Kolmogorov & Zabih 2004): a variable is a node; it ends on the source side
//! ("first") or the sink side ("second"); the cut counts the capacity of
//! every edge from the source side to the sink side, so
//! - `c·[v first]` is an edge `v -> sink` of capacity `c`;
//! - `c·[v second]` is an edge `source -> v`;
//! - `c·[u first]·[v second]` is an edge `u -> v`;
//! - `c·[any of V first]` uses one auxiliary node `o`: `v -> o` (hard) for
//!   each `v` in `V` and `o -> sink` (`c`): one `v` on the source side drags
//!   `o` there and cuts `o -> sink` once, however many of `V` are there;
//! - `c·[any of V second]`: `source -> o` (`c`) and `o -> v` (hard);
//! - `c·[u first]·[any of V second]`: `u -> a` (`c`) and `a -> v` (hard);
//! - `c·[u second]·[any of V first]`: `v -> a` (hard) and `a -> u` (`c`).
//!
//! The last two are what lets the cost policy count one copy per (tensor,
//! destination device) instead of one per consuming edge. With a single
//! element in `V` no auxiliary node is made (the plain edge is the same term).
//!
//! "Hard" edges get a capacity above the sum of every finite capacity, so
//! no minimum cut crosses one: every assignment of the variables has a cut of
//! finite capacity (auxiliary nodes then take their cheapest side).
//!
//! Invariants: the returned labelling attains the minimum of the sum of
//! terms; among minimum labellings it puts every variable it can on the
//! *first* side (the source side is the set of nodes that cannot reach the
//! sink in the residual graph, the largest minimum source set), so ties go to
//! the first choice; the same terms in the same order give the same answer.
//!
//! The flow is Dinic's algorithm on integer capacities (exact, no rounding
//! drift), hand-written in `max_flow.rs` (its doc says why not petgraph's).

use super::max_flow::Network;

/// An edge capacity: a cost, or hard (never cut).
#[derive(Clone, Copy, Debug)]
enum Cap {
    Finite(u64),
    Hard,
}

/// Node numbering: variables `0..n_vars`, then auxiliary nodes, then the
/// source and the sink (their numbers are fixed only when solving).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Node(u32),
    Source,
    Sink,
}

/// A sum of cost terms over binary variables; see the module doc.
#[derive(Clone, Debug, Default)]
pub(crate) struct CutProblem {
    n_vars: u32,
    n_nodes: u32,
    edges: Vec<(End, End, Cap)>,
}

impl CutProblem {
    /// A problem over `n_vars` variables and no terms yet.
    pub(crate) fn new(n_vars: usize) -> CutProblem {
        let n = u32::try_from(n_vars).unwrap_or(u32::MAX);
        CutProblem {
            n_vars: n,
            n_nodes: n,
            edges: Vec::new(),
        }
    }

    fn edge(&mut self, from: End, to: End, cap: Cap) {
        if from == to || matches!(cap, Cap::Finite(0)) {
            return;
        }
        self.edges.push((from, to, cap));
    }

    fn aux(&mut self) -> End {
        self.n_nodes += 1;
        End::Node(self.n_nodes - 1)
    }

    /// `c` when `v` takes its first choice.
    pub(crate) fn if_first(&mut self, v: u32, c: u64) {
        self.edge(End::Node(v), End::Sink, Cap::Finite(c));
    }

    /// `c` when `v` takes its second choice.
    pub(crate) fn if_second(&mut self, v: u32, c: u64) {
        self.edge(End::Source, End::Node(v), Cap::Finite(c));
    }

    /// `c` when at least one of `vars` takes its first choice.
    pub(crate) fn if_any_first(&mut self, vars: &[u32], c: u64) {
        match vars {
            [] => {}
            [v] => self.if_first(*v, c),
            _ if c == 0 => {}
            _ => {
                let o = self.aux();
                for &v in vars {
                    self.edge(End::Node(v), o, Cap::Hard);
                }
                self.edge(o, End::Sink, Cap::Finite(c));
            }
        }
    }

    /// `c` when at least one of `vars` takes its second choice.
    pub(crate) fn if_any_second(&mut self, vars: &[u32], c: u64) {
        match vars {
            [] => {}
            [v] => self.if_second(*v, c),
            _ if c == 0 => {}
            _ => {
                let o = self.aux();
                self.edge(End::Source, o, Cap::Finite(c));
                for &v in vars {
                    self.edge(o, End::Node(v), Cap::Hard);
                }
            }
        }
    }

    /// `c` when `u` takes its first choice and at least one of `vars` its second.
    pub(crate) fn if_first_and_any_second(&mut self, u: u32, vars: &[u32], c: u64) {
        match vars {
            [] => {}
            [v] => self.edge(End::Node(u), End::Node(*v), Cap::Finite(c)),
            _ if c == 0 => {}
            _ => {
                let a = self.aux();
                self.edge(End::Node(u), a, Cap::Finite(c));
                for &v in vars {
                    self.edge(a, End::Node(v), Cap::Hard);
                }
            }
        }
    }

    /// `c` when `u` takes its second choice and at least one of `vars` its first.
    pub(crate) fn if_second_and_any_first(&mut self, u: u32, vars: &[u32], c: u64) {
        match vars {
            [] => {}
            [v] => self.edge(End::Node(*v), End::Node(u), Cap::Finite(c)),
            _ if c == 0 => {}
            _ => {
                let a = self.aux();
                for &v in vars {
                    self.edge(End::Node(v), a, Cap::Hard);
                }
                self.edge(a, End::Node(u), Cap::Finite(c));
            }
        }
    }

    /// The minimum: for each variable, `true` when it takes its second
    /// choice; and the minimum's value (the sum of the terms).
    pub(crate) fn solve(&self) -> (Vec<bool>, u64) {
        let finite: u64 = self
            .edges
            .iter()
            .map(|e| match e.2 {
                Cap::Finite(c) => c,
                Cap::Hard => 0,
            })
            .fold(0u64, u64::saturating_add);
        let hard = finite.saturating_add(1);
        let source = self.n_nodes as usize;
        let sink = source + 1;
        let mut net = Network::new(sink + 1);
        let index = |end: End| match end {
            End::Node(i) => i as usize,
            End::Source => source,
            End::Sink => sink,
        };
        for &(from, to, cap) in &self.edges {
            let cap = match cap {
                Cap::Finite(c) => c,
                Cap::Hard => hard,
            };
            net.add_edge(index(from), index(to), cap);
        }
        let value = net.max_flow(source, sink);
        let reaches = net.reaches(sink);
        (reaches[..self.n_vars as usize].to_vec(), value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One term of a random problem, evaluated directly for the brute force.
    #[derive(Clone, Debug)]
    enum Term {
        First(u32, u64),
        Second(u32, u64),
        AnyFirst(Vec<u32>, u64),
        AnySecond(Vec<u32>, u64),
        FirstAndAnySecond(u32, Vec<u32>, u64),
        SecondAndAnyFirst(u32, Vec<u32>, u64),
    }

    fn value(terms: &[Term], second: &[bool]) -> u64 {
        let s = |v: &u32| second[*v as usize];
        let f = |v: &u32| !second[*v as usize];
        terms
            .iter()
            .map(|t| match t {
                Term::First(v, c) => u64::from(f(v)) * c,
                Term::Second(v, c) => u64::from(s(v)) * c,
                Term::AnyFirst(vs, c) => u64::from(vs.iter().any(f)) * c,
                Term::AnySecond(vs, c) => u64::from(vs.iter().any(s)) * c,
                Term::FirstAndAnySecond(u, vs, c) => u64::from(f(u) && vs.iter().any(s)) * c,
                Term::SecondAndAnyFirst(u, vs, c) => u64::from(s(u) && vs.iter().any(f)) * c,
            })
            .sum()
    }

    /// A small deterministic generator (no extra dependency for tests).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, below: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % below
        }
    }

    #[test]
    fn minimum_matches_brute_force_on_random_problems() {
        let mut rng = Lcg(7);
        for case in 0..300 {
            let n = 1 + rng.next(7) as u32;
            let mut terms = Vec::new();
            for _ in 0..rng.next(12) {
                let v = rng.next(n as u64) as u32;
                let c = rng.next(20);
                let vars: Vec<u32> = (0..1 + rng.next(3))
                    .map(|_| rng.next(n as u64) as u32)
                    .collect();
                terms.push(match rng.next(6) {
                    0 => Term::First(v, c),
                    1 => Term::Second(v, c),
                    2 => Term::AnyFirst(vars, c),
                    3 => Term::AnySecond(vars, c),
                    4 => Term::FirstAndAnySecond(v, vars, c),
                    _ => Term::SecondAndAnyFirst(v, vars, c),
                });
            }
            let mut p = CutProblem::new(n as usize);
            for t in &terms {
                match t.clone() {
                    Term::First(v, c) => p.if_first(v, c),
                    Term::Second(v, c) => p.if_second(v, c),
                    Term::AnyFirst(vs, c) => p.if_any_first(&vs, c),
                    Term::AnySecond(vs, c) => p.if_any_second(&vs, c),
                    Term::FirstAndAnySecond(u, vs, c) => p.if_first_and_any_second(u, &vs, c),
                    Term::SecondAndAnyFirst(u, vs, c) => p.if_second_and_any_first(u, &vs, c),
                }
            }
            let best = (0..1u32 << n)
                .map(|m| value(&terms, &(0..n).map(|i| m >> i & 1 == 1).collect::<Vec<_>>()))
                .min()
                .unwrap_or(0);
            let (second, cut) = p.solve();
            assert_eq!(cut, best, "case {case}: {terms:?}");
            assert_eq!(value(&terms, &second), best, "case {case}: labelling");
        }
    }

    #[test]
    fn ties_go_to_the_first_choice() {
        let mut p = CutProblem::new(2);
        p.if_first(0, 5);
        p.if_second(0, 5);
        p.if_first_and_any_second(0, &[1], 3);
        p.if_second_and_any_first(0, &[1], 3);
        assert_eq!(p.solve(), (vec![false, false], 5));
    }

    #[test]
    fn one_copy_per_destination_not_per_reader() {
        // Variable 0 is pinned first (a producer on device 0); 1..=3 read it.
        // Each reader saves 4 by moving, the move costs one copy of 6.
        let mut p = CutProblem::new(4);
        p.if_second(0, 1000);
        for v in 1..=3 {
            p.if_first(v, 4);
        }
        p.if_first_and_any_second(0, &[1, 2, 3], 6);
        let (second, cut) = p.solve();
        assert_eq!(second, [false, true, true, true]);
        assert_eq!(cut, 6);
    }
}
