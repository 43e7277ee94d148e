//! The tables of a batch: per row operation, the table it goes to (and, with derived
//! columns, the shape its values are in), as the router decided them ([`super::route`])
//! and the sink reads them, table by table.

use std::sync::Arc;

/// A record's place in its log: topic, partition, offset.
pub type SourcePosition = (String, i32, i64);

/// The table of each of a batch's row operations, when the connector writes many: an index
/// into `tables` per operation, in step with the operations. Empty for a connector with one
/// table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableRoutes {
    /// Per operation: its table, an index into `tables`.
    pub of: Vec<u32>,
    /// The batch's tables, each once, in the order first met.
    pub tables: Vec<Arc<str>>,
    /// With derived columns: per operation, its shape (an index into `shapes`): the
    /// columns its values are in.
    pub shape_of: Vec<u32>,
    /// The batch's shapes, each once.
    pub shapes: Vec<Arc<super::DerivedShape>>,
    /// Per shape: the record (topic, partition, offset) that first carried it in the
    /// batch, named where a change of the table is recorded (`sink.evolve`).
    pub shape_sources: Vec<SourcePosition>,
}

impl TableRoutes {
    /// Adds the next operation's table.
    pub fn push(&mut self, table: Arc<str>) {
        // The router hands out one `Arc` per table: a pointer comparison finds it, and
        // consecutive records of a partition mostly go to the table of the one before.
        let same = |t: &Arc<str>| Arc::ptr_eq(t, &table) || *t == table;
        let last = self.of.last().map(|&i| i as usize);
        let found = match last {
            Some(i) if same(&self.tables[i]) => Some(i),
            _ => self.tables.iter().rposition(same),
        };
        let index = match found {
            Some(index) => index,
            None => {
                self.tables.push(table);
                self.tables.len() - 1
            }
        };
        self.of.push(u32::try_from(index).unwrap_or(u32::MAX));
    }

    /// Adds the next operation's shape (with derived columns, after its table); `source`
    /// gives its record's position, asked only for a shape new to the batch.
    pub fn push_shape(
        &mut self,
        shape: Arc<super::DerivedShape>,
        source: impl FnOnce() -> SourcePosition,
    ) {
        let index = match self.shapes.iter().rposition(|s| Arc::ptr_eq(s, &shape)) {
            Some(index) => index,
            None => {
                self.shapes.push(shape);
                self.shape_sources.push(source());
                self.shapes.len() - 1
            }
        };
        self.shape_of.push(u32::try_from(index).unwrap_or(u32::MAX));
    }

    /// The shape of operation `op`, with derived columns.
    pub fn shape_of(&self, op: usize) -> Option<&Arc<super::DerivedShape>> {
        self.shapes.get(*self.shape_of.get(op)? as usize)
    }

    /// Whether the operations go to one configured table (no routes).
    pub fn is_empty(&self) -> bool {
        self.of.is_empty()
    }

    /// Keeps the routes of the operations `keep` says yes to, in step with a filter of the
    /// operations themselves.
    pub fn retain(&mut self, keep: &[bool]) {
        if self.of.is_empty() {
            return;
        }
        let mut at = 0;
        self.of.retain(|_| {
            let kept = keep.get(at).copied().unwrap_or(true);
            at += 1;
            kept
        });
        let mut at = 0;
        self.shape_of.retain(|_| {
            let kept = keep.get(at).copied().unwrap_or(true);
            at += 1;
            kept
        });
    }

    /// The table of operation `op`.
    pub fn table_of(&self, op: usize) -> Option<&Arc<str>> {
        self.tables.get(*self.of.get(op)? as usize)
    }

    /// The operations of `range` in record order, cut where the table changes: each
    /// stretch a table (an index into `tables`) with its operations' indices. Under
    /// `sink.transactions: source`, so that a source transaction's changes are written in
    /// its order (a parent row before its children, their deletes in reverse), as foreign
    /// keys on the replica ask.
    pub fn stretches(&self, range: std::ops::Range<usize>) -> Vec<(usize, Vec<usize>)> {
        let mut stretches: Vec<(usize, Vec<usize>)> = Vec::new();
        for op in range {
            let Some(&table) = self.of.get(op) else {
                continue;
            };
            match stretches.last_mut() {
                Some((last, ops)) if *last == table as usize => ops.push(op),
                _ => stretches.push((table as usize, vec![op])),
            }
        }
        stretches
    }

    /// The operations of `range` grouped by table: each table (an index into `tables`) with
    /// its operations' indices, in record order; tables in name order, so that two
    /// transactions writing the same tables lock them in the same order.
    pub fn groups(&self, range: std::ops::Range<usize>) -> Vec<(usize, Vec<usize>)> {
        let mut by_table: Vec<Vec<usize>> = vec![Vec::new(); self.tables.len()];
        for op in range {
            if let Some(&table) = self.of.get(op) {
                by_table[table as usize].push(op);
            }
        }
        let mut groups: Vec<(usize, Vec<usize>)> = by_table
            .into_iter()
            .enumerate()
            .filter(|(_, ops)| !ops.is_empty())
            .collect();
        groups.sort_by(|a, b| self.tables[a.0].cmp(&self.tables[b.0]));
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_group_operations_by_table_in_name_order() {
        let mut routes = TableRoutes::default();
        for t in ["b", "a", "b", "c", "a"] {
            routes.push(Arc::from(t));
        }
        assert_eq!(routes.tables.len(), 3);
        let groups = routes.groups(0..5);
        let named: Vec<(&str, Vec<usize>)> = groups
            .iter()
            .map(|(t, ops)| (&*routes.tables[*t], ops.clone()))
            .collect();
        assert_eq!(
            named,
            vec![("a", vec![1, 4]), ("b", vec![0, 2]), ("c", vec![3])]
        );
        routes.retain(&[true, false, true, true, false]);
        assert_eq!(routes.of.len(), 3);
        assert_eq!(&**routes.table_of(1).unwrap(), "b");
    }

    #[test]
    fn stretches_keep_record_order_and_cut_where_the_table_changes() {
        let mut routes = TableRoutes::default();
        for t in ["orders", "lines", "lines", "orders", "lines"] {
            routes.push(Arc::from(t));
        }
        let named: Vec<(&str, Vec<usize>)> = routes
            .stretches(0..5)
            .into_iter()
            .map(|(t, ops)| (&*routes.tables[t], ops))
            .collect();
        assert_eq!(
            named,
            vec![
                ("orders", vec![0]),
                ("lines", vec![1, 2]),
                ("orders", vec![3]),
                ("lines", vec![4])
            ]
        );
        assert_eq!(routes.stretches(1..3).len(), 1);
    }
}
