//! Slurm host lists (`node[1-2,5],login01`), expanded without calling `scontrol show hostnames`.

/// The host names a Slurm host list names, in order. Ranges keep their zero padding (`n[08-10]` gives
/// `n08 n09 n10`); `None assigned`, `(null)` and the empty string name no host. A malformed range is
/// kept as written rather than guessed at.
pub fn expand(list: &str) -> Vec<String> {
    let list = list.trim();
    if list.is_empty() || list == "None assigned" || list == "(null)" {
        return Vec::new();
    }
    let mut out = Vec::new();
    for item in split_top(list) {
        expand_item(item, &mut out);
    }
    out
}

/// Splits at the commas outside brackets.
fn split_top(list: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

fn expand_item(item: &str, out: &mut Vec<String>) {
    let (Some(open), Some(close)) = (item.find('['), item.find(']')) else {
        out.push(item.to_owned());
        return;
    };
    if close < open {
        out.push(item.to_owned());
        return;
    }
    let (prefix, ranges, rest) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    let mut tails = Vec::new();
    expand_item(rest, &mut tails);
    for range in ranges.split(',') {
        let numbers = match range.split_once('-') {
            Some((lo, hi)) => match (lo.parse::<u64>(), hi.parse::<u64>()) {
                (Ok(a), Ok(b)) if a <= b && b - a < 100_000 => (a..=b).map(|n| (n, lo.len())).collect(),
                _ => {
                    out.push(item.to_owned());
                    return;
                }
            },
            None => match range.parse::<u64>() {
                Ok(n) => vec![(n, range.len())],
                Err(_) => {
                    out.push(item.to_owned());
                    return;
                }
            },
        };
        for (n, width) in numbers {
            for tail in &tails {
                out.push(format!("{prefix}{n:0width$}{tail}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::expand;

    #[test]
    fn lists_ranges_and_padding() {
        assert_eq!(expand("node[1-2]"), ["node1", "node2"]);
        assert_eq!(expand("node1"), ["node1"]);
        assert_eq!(expand("gpu[08-10,12],login"), ["gpu08", "gpu09", "gpu10", "gpu12", "login"]);
        assert_eq!(expand("r[1-2]-n[1-2]"), ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]);
        assert!(expand("None assigned").is_empty());
        assert!(expand("").is_empty());
        assert_eq!(expand("bad[x-1]"), ["bad[x-1]"]);
    }
}
