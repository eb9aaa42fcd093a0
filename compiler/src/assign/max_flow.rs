//! Maximum flow by Dinic's algorithm, for the minimum cuts of `min_cut.rs`.
//!
//! Hand-written rather than taken from petgraph: petgraph 0.8's
//! `algo::dinics` restarts its search from the source for every augmenting
//! path and allocates a node-sized vector each time (it keeps no current-arc
//! pointers), so a phase costs O(paths x (V + E)) instead of O(V x E). On
//! the 32-layer llama-7B-shaped graph it took 74% of the assign pass (18 ms
//! with two devices, 45 ms with three; 3.5 and 10.5 ms with this one), and
//! the issue allows 20 ms for the whole compile.
//!
//! Invariants: capacities are integers, so the flow is exact; after
//! [`Network::max_flow`] the capacities are the residual ones, and
//! [`Network::reaches`] reads the minimum cut from them.

use std::collections::VecDeque;

/// A flow network in residual form: edge `e` and `e ^ 1` are a forward
/// edge and its reverse; `cap` is the residual capacity.
pub(super) struct Network {
    adj: Vec<Vec<u32>>,
    to: Vec<u32>,
    cap: Vec<u64>,
}

impl Network {
    pub(super) fn new(n: usize) -> Network {
        Network {
            adj: vec![Vec::new(); n],
            to: Vec::new(),
            cap: Vec::new(),
        }
    }

    pub(super) fn add_edge(&mut self, from: usize, to: usize, cap: u64) {
        let e = self.to.len() as u32;
        self.adj[from].push(e);
        self.adj[to].push(e + 1);
        self.to.extend([to as u32, from as u32]);
        self.cap.extend([cap, 0]);
    }

    /// Dinic: BFS levels, then blocking flows by depth-first search with
    /// current-arc pointers (iterative: graphs are thousands of nodes deep).
    pub(super) fn max_flow(&mut self, s: usize, t: usize) -> u64 {
        let n = self.adj.len();
        let mut total = 0u64;
        let mut level = vec![u32::MAX; n];
        let mut next = vec![0usize; n];
        let mut path: Vec<u32> = Vec::new();
        loop {
            level.fill(u32::MAX);
            level[s] = 0;
            let mut queue = VecDeque::from([s]);
            while let Some(v) = queue.pop_front() {
                for &e in &self.adj[v] {
                    let w = self.to[e as usize] as usize;
                    if self.cap[e as usize] > 0 && level[w] == u32::MAX {
                        level[w] = level[v] + 1;
                        queue.push_back(w);
                    }
                }
            }
            if level[t] == u32::MAX {
                return total;
            }
            next.fill(0);
            path.clear();
            let mut v = s;
            loop {
                if v == t {
                    let push = path
                        .iter()
                        .map(|&e| self.cap[e as usize])
                        .min()
                        .unwrap_or(0);
                    for &e in &path {
                        self.cap[e as usize] -= push;
                        self.cap[(e ^ 1) as usize] += push;
                    }
                    total = total.saturating_add(push);
                    path.clear();
                    v = s;
                    continue;
                }
                let mut advanced = false;
                while next[v] < self.adj[v].len() {
                    let e = self.adj[v][next[v]];
                    let w = self.to[e as usize] as usize;
                    if self.cap[e as usize] > 0 && level[w] == level[v] + 1 {
                        path.push(e);
                        v = w;
                        advanced = true;
                        break;
                    }
                    next[v] += 1;
                }
                if advanced {
                    continue;
                }
                // Dead end: no augmenting path goes through v this phase.
                level[v] = u32::MAX;
                match path.pop() {
                    Some(e) => {
                        v = self.to[(e ^ 1) as usize] as usize;
                        next[v] += 1;
                    }
                    None => break,
                }
            }
        }
    }

    /// Nodes that reach `t` in the residual graph.
    pub(super) fn reaches(&self, t: usize) -> Vec<bool> {
        let mut reaches = vec![false; self.adj.len()];
        reaches[t] = true;
        let mut queue = VecDeque::from([t]);
        while let Some(y) = queue.pop_front() {
            // Edge e leaves y; its pair e ^ 1 runs from to[e] into y.
            for &e in &self.adj[y] {
                let x = self.to[e as usize] as usize;
                if self.cap[(e ^ 1) as usize] > 0 && !reaches[x] {
                    reaches[x] = true;
                    queue.push_back(x);
                }
            }
        }
        reaches
    }
}
