//! The per-second points of every series of the status page.

use std::collections::{BTreeMap, HashMap, VecDeque};

/// How many per-second points each series keeps: 5 minutes.
pub const HISTORY_POINTS: usize = 300;

/// The per-second points of every series.
#[derive(Debug, Default)]
pub(super) struct History {
    pub(super) series: Vec<Series>,
    /// The counts of each source at the last point, by its id.
    last: BTreeMap<u64, [u64; 3]>,
    pub(super) ticks: u64,
    pub(super) last_ms: u64,
}

/// One set of counters at a point: a configured limit's, or the ad-hoc or
/// other decisions'.
pub(super) struct Source {
    pub(super) domain: String,
    pub(super) rule: String,
    /// Which counters: a reloaded limit has new counters, from zero, under
    /// a new id.
    pub(super) id: u64,
    pub(super) counts: [u64; 3],
}

/// The points of one domain and rule.
#[derive(Debug)]
pub(super) struct Series {
    pub(super) domain: String,
    pub(super) rule: String,
    pub(super) since_start: [u64; 3],
    pub(super) points: VecDeque<[u64; 3]>,
}

impl History {
    /// Adds a point to every series: what its sources counted since the
    /// last point. Sources with the same domain and rule add up; series
    /// with no source left are dropped.
    pub(super) fn push(&mut self, current: Vec<Source>, now_ms: u64) {
        let mut old: HashMap<(String, String), Series> = self
            .series
            .drain(..)
            .map(|s| ((s.domain.clone(), s.rule.clone()), s))
            .collect();
        let mut last = BTreeMap::new();
        let mut index: HashMap<(String, String), usize> = HashMap::new();
        for source in current {
            let before = self.last.get(&source.id).copied().unwrap_or([0; 3]);
            let delta: [u64; 3] =
                std::array::from_fn(|i| source.counts[i].saturating_sub(before[i]));
            last.insert(source.id, source.counts);
            let key = (source.domain, source.rule);
            let at = match index.get(&key) {
                Some(&at) => at,
                None => {
                    let mut series = old.remove(&key).unwrap_or_else(|| Series {
                        domain: key.0.clone(),
                        rule: key.1.clone(),
                        since_start: [0; 3],
                        points: VecDeque::with_capacity(HISTORY_POINTS),
                    });
                    if series.points.len() == HISTORY_POINTS {
                        series.points.pop_front();
                    }
                    series.points.push_back([0; 3]);
                    self.series.push(series);
                    index.insert(key, self.series.len() - 1);
                    self.series.len() - 1
                }
            };
            let series = &mut self.series[at];
            if let Some(point) = series.points.back_mut() {
                for i in 0..3 {
                    point[i] += delta[i];
                    series.since_start[i] += delta[i];
                }
            }
        }
        self.last = last;
        self.ticks += 1;
        self.last_ms = now_ms;
    }
}
