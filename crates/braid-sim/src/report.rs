//! Experiment results: `results.json`, `results.csv` and SVG plots.

use plotters::prelude::*;
use serde::Serialize;
use std::io;
use std::path::Path;

/// One row of an experiment's results. Keys are those documented in `docs/sim.md`; a key that
/// does not apply to an experiment is left out.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Row {
    /// tcp-check: the lab scenario's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    /// tcp-check: the path's index in the scenario (none on a row for all paths together).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<u64>,
    /// tcp-check: where the figure comes from, `sim` (the model) or `lab` (kernel TCP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// tcp-check: the lab variant, `sum` (every path at once) or `best_single` (each alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// Which sweep of the experiment the row belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep: Option<String>,
    /// Scheduler: `srr`, `grr`, `rr` or `rfq`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// Whether the receiver ran logical reception (`false`: deliver on arrival).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logical_reception: Option<bool>,
    /// Link rates in Mbit/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_mbit: Option<Vec<f64>>,
    /// Sum of the link rates in Mbit/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sum_mbit: Option<f64>,
    /// Payload delivered in order, Mbit/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput_mbit: Option<f64>,
    /// Goodput as a fraction of `sum_mbit`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput_ratio: Option<f64>,
    /// Misordered deliveries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out_of_order: Option<u64>,
    /// Number of paths.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paths: Option<u64>,
    /// Rounds `K`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub k_rounds: Option<u64>,
    /// Largest `|bytes_i - K q_i|`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_deviation_bytes: Option<f64>,
    /// Mean over paths and trials of `|bytes_i - K q_i| / (K q_i)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_relative_deviation: Option<f64>,
    /// The bound (Lemma 3.4: the largest packet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_bytes: Option<f64>,
    /// Traffic class (QoSbox: 1 is the paper's class 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<u64>,
    /// Traffic offered to the bottleneck, Mbit/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offered_mbit: Option<f64>,
    /// Traffic sent by the bottleneck, Mbit/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throughput_mbit: Option<f64>,
    /// Mean queueing delay, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms_mean: Option<f64>,
    /// Largest queueing delay, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms_max: Option<f64>,
    /// `delay_ms_mean` over the class above's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ratio: Option<f64>,
    /// Loss rate, percent (resync: during the loss period).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss_pct: Option<f64>,
    /// `loss_pct` over the class above's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss_ratio: Option<f64>,
    /// Packets sent later than the class's delay bound, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_violations_pct: Option<f64>,
    /// Marker interval in rounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub marker_interval_rounds: Option<u64>,
    /// Marker position: `start`, `middle` or `end`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub marker_position: Option<String>,
    /// Time from the end of loss to the last inversion (a delivery of a packet older than the
    /// one delivered just before it), ms: from then on delivery is FIFO.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resync_ms: Option<f64>,
    /// The bound: marker interval plus the largest one-way delay, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_ms: Option<f64>,
    /// Measured `t` of Theorem 5.1 (Appendix B, Lemma B.4): time from the end of loss until a
    /// marker sent after it has been received and processed on every path, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub marker_crossing_ms: Option<f64>,
    /// Whether every trial recovered within `bound_ms` and no later than its own
    /// `marker_crossing_ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub within_bound: Option<bool>,
    /// BAG: which scenario of the experiment (`base`, `slow-1s`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_case: Option<String>,
    /// TCP goodput, kbit/s (BAG Table I's "Thr").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput_kbit: Option<f64>,
    /// Duplicate ACKs the TCP sender received.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dup_acks: Option<u64>,
    /// Segments the TCP sender retransmitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
    /// tcp-check: the model's goodput over this lab row's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sim_over_lab: Option<f64>,
    /// TCP retransmission timeouts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<u64>,
    /// Time from a path's rate change until PET's estimate is within 10% of the new rate, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate_follow_ms: Option<f64>,
    /// Simulator events processed for the row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<u64>,
    /// Rate of the swept path over the fixed one (pTCP Figure 4(a)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// Weight of the connection: its number of micro-flows per path (pTCP section 4.2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<u64>,
    /// The ideal goodput: the sum of independent single-path flows, in Mbit/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ideal_mbit: Option<f64>,
    /// The longest time the receiving application waited for data, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stall_ms_max: Option<f64>,
}

/// An experiment's results.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Experiment name.
    pub experiment: String,
    /// The seed.
    pub seed: u64,
    /// The rows.
    pub rows: Vec<Row>,
}

impl Report {
    /// Write `results.json` and `results.csv` into `dir` (created if missing).
    pub fn write(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let json = serde_json::to_string_pretty(self).map_err(io::Error::other)?;
        std::fs::write(dir.join("results.json"), json + "\n")?;
        self.write_csv(&dir.join("results.csv"))
    }

    fn write_csv(&self, path: &Path) -> io::Result<()> {
        let values: Vec<serde_json::Map<String, serde_json::Value>> = self
            .rows
            .iter()
            .map(|r| match serde_json::to_value(r) {
                Ok(serde_json::Value::Object(m)) => m,
                _ => serde_json::Map::new(),
            })
            .collect();
        let mut columns: Vec<String> = Vec::new();
        for m in &values {
            for k in m.keys() {
                if !columns.contains(k) {
                    columns.push(k.clone());
                }
            }
        }
        // Columns in the struct's declaration order, whatever order rows introduced them in.
        let order = serde_json::to_value(Row::full_example())
            .ok()
            .and_then(|v| v.as_object().map(|m| m.keys().cloned().collect::<Vec<_>>()))
            .unwrap_or_default();
        columns.sort_by_key(|c| order.iter().position(|o| o == c).unwrap_or(usize::MAX));
        let mut w = csv::Writer::from_path(path).map_err(io::Error::other)?;
        w.write_record(&columns).map_err(io::Error::other)?;
        for m in &values {
            let rec: Vec<String> = columns
                .iter()
                .map(|c| match m.get(c) {
                    None | Some(serde_json::Value::Null) => String::new(),
                    Some(serde_json::Value::String(s)) => s.clone(),
                    Some(serde_json::Value::Array(a)) => a
                        .iter()
                        .map(|x| x.to_string())
                        .collect::<Vec<_>>()
                        .join(";"),
                    Some(v) => v.to_string(),
                })
                .collect();
            w.write_record(&rec).map_err(io::Error::other)?;
        }
        w.flush()
    }
}

impl Row {
    /// A row with every key set, to fix the column order.
    fn full_example() -> Row {
        Row {
            scenario: Some(String::new()),
            path: Some(0),
            source: Some(String::new()),
            variant: Some(String::new()),
            sweep: Some(String::new()),
            scheme: Some(String::new()),
            logical_reception: Some(false),
            link_mbit: Some(Vec::new()),
            sum_mbit: Some(0.0),
            goodput_mbit: Some(0.0),
            goodput_ratio: Some(0.0),
            out_of_order: Some(0),
            paths: Some(0),
            k_rounds: Some(0),
            max_deviation_bytes: Some(0.0),
            mean_relative_deviation: Some(0.0),
            bound_bytes: Some(0.0),
            class: Some(0),
            offered_mbit: Some(0.0),
            throughput_mbit: Some(0.0),
            delay_ms_mean: Some(0.0),
            delay_ms_max: Some(0.0),
            delay_ratio: Some(0.0),
            loss_pct: Some(0.0),
            loss_ratio: Some(0.0),
            delay_violations_pct: Some(0.0),
            marker_interval_rounds: Some(0),
            marker_position: Some(String::new()),
            resync_ms: Some(0.0),
            bound_ms: Some(0.0),
            marker_crossing_ms: Some(0.0),
            within_bound: Some(false),
            delay_case: Some(String::new()),
            goodput_kbit: Some(0.0),
            dup_acks: Some(0),
            retransmits: Some(0),
            sim_over_lab: Some(0.0),
            timeouts: Some(0),
            estimate_follow_ms: Some(0.0),
            events: Some(0),
            ratio: Some(0.0),
            weight: Some(0),
            ideal_mbit: Some(0.0),
            stall_ms_max: Some(0.0),
        }
    }
}

/// One line on a plot.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// Points, in x order.
    pub points: Vec<(f64, f64)>,
    /// Draw dashed (reference lines such as bounds and ideals).
    pub dashed: bool,
}

/// A line plot.
#[derive(Clone, Debug)]
pub struct Plot {
    /// Title.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Log-scale x axis.
    pub log_x: bool,
    /// Log-scale y axis.
    pub log_y: bool,
    /// The lines.
    pub series: Vec<Series>,
}

impl Plot {
    /// Render to an SVG file.
    pub fn write_svg(&self, path: &Path) -> io::Result<()> {
        self.render(path)
            .map_err(|e| io::Error::other(e.to_string()))
    }

    fn render(&self, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let all = || self.series.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1) =
            all().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
        let (mut y0, mut y1) =
            all().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
        if x0 > x1 {
            (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
        }
        if x0 == x1 {
            x1 = x0 + 1.0;
        }
        if self.log_y {
            y0 = y0.max(1e-9) / 1.5;
            y1 = y1.max(1e-9) * 1.5;
        } else {
            y0 = y0.min(0.0);
            y1 = if y1 > y0 { y1 * 1.08 } else { y0 + 1.0 };
        }
        let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
        root.fill(&WHITE)?;
        let palette = [
            RGBColor(31, 119, 180),
            RGBColor(255, 127, 14),
            RGBColor(44, 160, 44),
            RGBColor(214, 39, 40),
            RGBColor(148, 103, 189),
            RGBColor(140, 86, 75),
            RGBColor(227, 119, 194),
            RGBColor(127, 127, 127),
            RGBColor(188, 189, 34),
            RGBColor(23, 190, 207),
        ];
        macro_rules! draw {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .x_desc(self.x_label.as_str())
                    .y_desc(self.y_label.as_str())
                    .draw()?;
                for (i, s) in self.series.iter().enumerate() {
                    let color = palette[i % palette.len()];
                    let style = color.stroke_width(2);
                    if s.dashed {
                        chart
                            .draw_series(DashedLineSeries::new(
                                s.points.iter().copied(),
                                6,
                                4,
                                style,
                            ))?
                            .label(s.name.as_str())
                            .legend(move |(x, y)| {
                                PathElement::new(vec![(x, y), (x + 20, y)], color)
                            });
                    } else {
                        chart
                            .draw_series(LineSeries::new(s.points.iter().copied(), style))?
                            .label(s.name.as_str())
                            .legend(move |(x, y)| {
                                PathElement::new(vec![(x, y), (x + 20, y)], color)
                            });
                        chart.draw_series(
                            s.points.iter().map(|&p| Circle::new(p, 3, color.filled())),
                        )?;
                    }
                }
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .position(SeriesLabelPosition::UpperLeft)
                    .draw()?;
            }};
        }
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(self.title.as_str(), ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(65);
        match (self.log_x, self.log_y) {
            (false, false) => draw!(builder.build_cartesian_2d(x0..x1, y0..y1)?),
            (true, false) => draw!(builder.build_cartesian_2d((x0..x1).log_scale(), y0..y1)?),
            (false, true) => draw!(builder.build_cartesian_2d(x0..x1, (y0..y1).log_scale())?),
            (true, true) => {
                draw!(builder.build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())?)
            }
        }
        root.present()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_json_csv_and_svg() {
        let dir = std::env::temp_dir().join(format!("braid-report-{}", std::process::id()));
        let report = Report {
            experiment: "demo".into(),
            seed: 7,
            rows: vec![
                Row {
                    scheme: Some("srr".into()),
                    link_mbit: Some(vec![10.0, 20.0]),
                    goodput_mbit: Some(29.5),
                    ..Row::default()
                },
                Row {
                    scheme: Some("rr".into()),
                    out_of_order: Some(3),
                    ..Row::default()
                },
            ],
        };
        report.write(&dir).unwrap();
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap())
                .unwrap();
        assert_eq!(json["experiment"], "demo");
        assert_eq!(json["rows"][0]["link_mbit"][1], 20.0);
        assert!(json["rows"][0].get("out_of_order").is_none());
        let csv = std::fs::read_to_string(dir.join("results.csv")).unwrap();
        assert_eq!(
            csv.lines().next().unwrap(),
            "scheme,link_mbit,goodput_mbit,out_of_order"
        );
        assert_eq!(csv.lines().nth(1).unwrap(), "srr,10.0;20.0,29.5,");
        let plot = Plot {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            log_x: true,
            log_y: false,
            series: vec![Series {
                name: "a".into(),
                points: vec![(1.0, 2.0), (10.0, 3.0)],
                dashed: false,
            }],
        };
        plot.write_svg(&dir.join("plot.svg")).unwrap();
        let svg = std::fs::read_to_string(dir.join("plot.svg")).unwrap();
        assert!(svg.contains("<svg") && svg.contains("polyline"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
