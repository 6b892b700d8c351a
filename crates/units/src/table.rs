//! Tables for people: columns aligned, numbers right-aligned. The one
//! renderer of every report's text (the CLI's, the libraries' `Display`s).

/// A table: a header row and data rows, printed with aligned columns.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Column widths over the header and every row.
    fn widths(&self) -> Vec<usize> {
        let mut w: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                if i < w.len() {
                    w[i] = w[i].max(c.chars().count());
                }
            }
        }
        w
    }

    /// The table as text: the first column left-aligned, the others right.
    pub fn render(&self) -> String {
        let w = self.widths();
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                let width = w.get(i).copied().unwrap_or(0);
                if i == 0 {
                    s.push_str(&format!("{c:<width$}"));
                } else {
                    s.push_str(&format!("  {c:>width$}"));
                }
            }
            s.trim_end().to_string()
        };
        let mut out = line(&self.header);
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        out
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ns, si};

    #[test]
    fn columns_align() {
        let mut t = Table::new(&["name", "value"]);
        t.row(vec!["a".into(), "1".into()]);
        t.row(vec!["longer".into(), "12345".into()]);
        assert_eq!(t.render(), "name    value\na           1\nlonger  12345\n");
        assert_eq!(si(1_234_000.0), "1.23M");
        assert_eq!(si(999.0), "999");
        assert_eq!(ns(12_300), "12.3us");
    }
}
