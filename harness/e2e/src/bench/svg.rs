//! The scale-up timeline as a hand-written SVG: membership phases (vertical markers), the
//! revision of every node (one lane each: solid while running a revision, hatched while
//! installing the next) and the probe's write latency (dots; failed writes as red crosses).

use std::fmt::Write as _;

use super::scaleup::ScaleUpReport;

const W: f64 = 960.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const PALETTE: [&str; 8] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#edc948", "#76b7b2", "#ff9da7", "#9c755f",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Where the timeline's parts go: its time span and the lanes' and latency panel's places.
#[derive(Clone, Copy, Debug)]
struct Layout {
    t_min: f64,
    t_max: f64,
    lane_h: f64,
    rev_top: f64,
    lat_top: f64,
    lat_h: f64,
}

impl Layout {
    /// The x coordinate of `t` seconds.
    fn x(&self, t: f64) -> f64 {
        LEFT + (t - self.t_min) / (self.t_max - self.t_min) * (W - LEFT - RIGHT)
    }
}

/// One lane per node: solid while it runs a revision, hatched while it installs the next.
fn revision_lanes(s: &mut String, r: &ScaleUpReport, l: &Layout, nodes: &[String]) {
    let (lane_h, rev_top) = (l.lane_h, l.rev_top);
    let x = |t: f64| l.x(t);
    for (i, node) in nodes.iter().enumerate() {
        let y = rev_top + lane_h * i as f64;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            y + 16.0,
            esc(node)
        );
        let points: Vec<(f64, i64, Option<i64>)> = r
            .samples
            .iter()
            .filter_map(|smp| {
                smp.nodes
                    .iter()
                    .find(|n| &n.0 == node)
                    .map(|n| (smp.at_s, n.1, n.2))
            })
            .collect();
        let mut k = 0;
        while k < points.len() {
            let (t0, rev, target) = points[k];
            let mut j = k + 1;
            while j < points.len() && points[j].1 == rev && points[j].2 == target {
                j += 1;
            }
            let t1 = points.get(j).map_or(r.phases.done_s, |p| p.0);
            let color = PALETTE[usize::try_from(rev.max(0)).unwrap_or(0) % PALETTE.len()];
            let fill = if target.is_some() {
                "url(#hatch)"
            } else {
                color
            };
            let (x0, x1) = (x(t0), x(t1).max(x(t0) + 1.0));
            let _ = writeln!(
                s,
                r#"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{}" fill="{fill}" stroke="{color}"/>"#,
                y + 3.0,
                x1 - x0,
                lane_h - 6.0
            );
            if x1 - x0 > 26.0 {
                let label = match target {
                    Some(t) => format!("r{rev}→r{t}"),
                    None if rev == 0 => "none".to_owned(),
                    None => format!("r{rev}"),
                };
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" fill="{}">{label}</text>"#,
                    x0 + 4.0,
                    y + 17.0,
                    if target.is_some() { "black" } else { "white" }
                );
            }
            k = j;
        }
    }
}

/// The probe's put latency: dots, failed writes as red crosses.
fn latency_panel(s: &mut String, r: &ScaleUpReport, l: &Layout) {
    let (t_min, t_max, lat_top, lat_h) = (l.t_min, l.t_max, l.lat_top, l.lat_h);
    let x = |t: f64| l.x(t);
    let max_lat = r
        .writes
        .iter()
        .map(|w| w.latency_ms)
        .fold(10.0, f64::max)
        .min(2000.0);
    let ly = |ms: f64| lat_top + lat_h - (ms.min(max_lat) / max_lat) * lat_h;
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{lat_top}" width="{}" height="{lat_h}" fill="none" stroke="#ccc"/>"##,
        W - LEFT - RIGHT
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="end">{max_lat:.0} ms</text><text x="{}" y="{}" text-anchor="end">0</text><text x="{LEFT}" y="{}">probe put latency (one small put every 50 ms)</text>"#,
        LEFT - 6.0,
        lat_top + 10.0,
        LEFT - 6.0,
        lat_top + lat_h,
        lat_top - 6.0
    );
    for w in &r.writes {
        if w.at_s < t_min || w.at_s > t_max {
            continue;
        }
        if w.ok {
            let _ = writeln!(
                s,
                r##"<circle cx="{:.1}" cy="{:.1}" r="2" fill="#4e79a7"/>"##,
                x(w.at_s),
                ly(w.latency_ms)
            );
        } else {
            let (cx, cy) = (x(w.at_s), ly(w.latency_ms));
            let _ = writeln!(
                s,
                r##"<path d="M{:.1} {:.1}l6 6m0 -6l-6 6" stroke="#e15759" stroke-width="1.5"/>"##,
                cx - 3.0,
                cy - 3.0
            );
        }
    }
}

/// Phase markers across the whole plot.
fn phase_markers(s: &mut String, r: &ScaleUpReport, l: &Layout) {
    let (lat_top, lat_h) = (l.lat_top, l.lat_h);
    let x = |t: f64| l.x(t);
    let mut markers = vec![(0.0, "Node Ready".to_owned())];
    for (t, what) in [
        (r.phases.learner_added_s, "learner added"),
        (r.phases.learner_started_s, "learner started"),
        (r.phases.promoted_s, "promoted"),
    ] {
        if let Some(t) = t {
            markers.push((t, what.to_owned()));
        }
    }
    markers.push((r.phases.done_s, "all on final revision".to_owned()));
    for (i, (t, what)) in markers.iter().enumerate() {
        let mx = x(*t);
        let _ = writeln!(
            s,
            r##"<line x1="{mx:.1}" y1="{}" x2="{mx:.1}" y2="{}" stroke="#333" stroke-dasharray="3,3"/>"##,
            52.0 + 12.0 * i as f64,
            lat_top + lat_h
        );
        let anchor = if mx > W - 160.0 { "end" } else { "start" };
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="{anchor}" font-size="11">{} ({t:.2}s)</text>"#,
            mx + if anchor == "end" { -3.0 } else { 3.0 },
            60.0 + 12.0 * i as f64,
            esc(what)
        );
    }
}

/// The time axis, in seconds after the new Node is Ready.
fn time_axis(s: &mut String, l: &Layout) {
    let (t_min, t_max, lat_top, lat_h) = (l.t_min, l.t_max, l.lat_top, l.lat_h);
    let x = |t: f64| l.x(t);
    let axis_y = lat_top + lat_h + 18.0;
    let span = t_max - t_min;
    let step = [
        0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
    ]
    .into_iter()
    .find(|st| span / st <= 12.0)
    .unwrap_or(600.0);
    let mut t = (t_min / step).ceil() * step;
    while t <= t_max {
        let t_label = if t.abs() < step / 1000.0 { 0.0 } else { t };
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{axis_y}" text-anchor="middle">{}</text>"#,
            x(t),
            if step < 1.0 {
                format!("{t_label:.1}")
            } else {
                format!("{t_label:.0}")
            }
        );
        t += step;
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">seconds after the new Node is Ready</text>"#,
        (LEFT + W - RIGHT) / 2.0,
        axis_y + 18.0
    );
}

/// Renders the timeline of `r` (title `title`).
pub fn render(r: &ScaleUpReport, title: &str) -> String {
    let t_min = r
        .samples
        .first()
        .map_or(0.0, |s| s.at_s)
        .min(-r.phases.node_ready_after_add_s);
    let t_max = r.phases.done_s.max(0.1) * 1.03;
    let mut nodes: Vec<String> = r
        .samples
        .iter()
        .flat_map(|s| s.nodes.iter().map(|n| n.0.clone()))
        .collect();
    nodes.sort();
    nodes.dedup();
    let lane_h = 26.0;
    // One row per phase label above the lanes.
    let top = 56.0 + 12.0 * 5.0;
    let rev_top = top + 6.0;
    let lat_top = rev_top + lane_h * nodes.len() as f64 + 40.0;
    let lat_h = 150.0;
    let h = lat_top + lat_h + 60.0;
    let l = Layout {
        t_min,
        t_max,
        lane_h,
        rev_top,
        lat_top,
        lat_h,
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r##"<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="white"/><line x1="0" y1="0" x2="0" y2="6" stroke="#888" stroke-width="3"/></pattern></defs>"##
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="22" font-size="15" font-weight="bold">{}</text>"#,
        esc(title)
    );
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="40" fill="#555">seconds after the new Node is Ready; lanes: each node's running revision (hatched: installing); dots: probe put latency</text>"##
    );
    // Revision lanes.
    revision_lanes(&mut s, r, &l, &nodes);
    // Latency panel.
    latency_panel(&mut s, r, &l);
    // Phase markers across the whole plot.
    phase_markers(&mut s, r, &l);
    // Time axis.
    time_axis(&mut s, &l);
    s.push_str("</svg>\n");
    s
}
