//! The plot of a run's losses and memory, both modes overlaid (`<stem>.svg` in `--out`).

use std::path::Path;

use leanburn::StepReport;
use leanburn::{RunDir, RunOutcome};
use plotters::prelude::*;

use super::flags::Mode;

/// One mode's curves.
struct Curves {
    mode: &'static str,
    /// (step, loss) of every step that read its loss back.
    train: Vec<(f64, f64)>,
    /// The same against the training seconds before the step's end, each process's first
    /// step left out.
    train_by_time: Vec<(f64, f64)>,
    validation: Vec<(f64, f64)>,
    validation_by_time: Vec<(f64, f64)>,
    /// Steps the predict phase ran (its jumps, kept), and its rolled-back blocks.
    predicted: Vec<f64>,
    rolled_back: Vec<f64>,
    /// Device memory in use, where the backend has a pool.
    memory_mib: Vec<(f64, f64)>,
    /// What the device's pool holds, in use or kept for reuse (what the device lends it).
    reserved_mib: Vec<(f64, f64)>,
    /// The most bytes in use inside the steps (`--sample-pool-ms`), each process's first
    /// step (autotuning's buffers) left out.
    in_step_mib: Vec<(f64, f64)>,
    /// The process's resident memory, where it has none (host RAM).
    host_mib: Vec<(f64, f64)>,
}

/// Weight of the old value in the smoothed train loss (TensorBoard's default 0.6 is for
/// noisier, sparser logs; W&B's running average is about this).
const SMOOTHING: f64 = 0.9;

impl Curves {
    fn new(mode: Mode, records: &[StepReport], validations: &[leanburn::runner::ValidationPoint]) -> Option<Self> {
        let at = |r: &StepReport| r.step as f64 + 1.0;
        let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
        // Training seconds after each process's first step, whose time is mostly compiling
        // and tuning kernels (minutes on a cold GPU): the axis shows the pace of training.
        let mut seconds = 0.0;
        let elapsed: Vec<f64> = records
            .iter()
            .map(|r| {
                seconds += if r.first_in_process { 0.0 } else { r.seconds };
                seconds
            })
            .collect();
        // A validation's seconds count every step before it: take out the first steps'.
        let start_up_before = |step: usize| -> f64 {
            records.iter().filter(|r| r.first_in_process && r.step < step).map(|r| r.seconds).sum()
        };
        let finite = |r: &StepReport| r.loss.filter(|l| l.is_finite());
        Some(Curves {
            mode: mode.name(),
            train: records.iter().filter_map(|r| finite(r).map(|l| (at(r), l))).collect(),
            train_by_time: records.iter().zip(&elapsed).filter_map(|(r, t)| finite(r).map(|l| (*t, l))).collect(),
            validation: validations.iter().map(|p| (p.step as f64, p.validation.loss)).collect(),
            validation_by_time: validations
                .iter()
                .map(|p| ((p.train_seconds - start_up_before(p.step)).max(0.0), p.validation.loss))
                .collect(),
            predicted: records.iter().filter(|r| r.predicted && !r.rolled_back).map(at).collect(),
            rolled_back: records.iter().filter(|r| r.rolled_back).map(at).collect(),
            memory_mib: records.iter().filter_map(|r| r.memory.map(|m| (at(r), mib(m.bytes_in_use)))).collect(),
            reserved_mib: records.iter().filter_map(|r| r.memory.map(|m| (at(r), mib(m.bytes_reserved)))).collect(),
            in_step_mib: records
                .iter()
                .filter(|r| !r.first_in_process)
                .filter_map(|r| r.in_step_peak.map(|p| (at(r), mib(p.peak_in_use))))
                .collect(),
            host_mib: records.iter().filter_map(|r| r.host_memory.map(|m| (at(r), mib(m.resident)))).collect(),
        })
        .filter(|c| !c.train.is_empty())
    }
}

/// An exponential moving average of `points`' values, debiased at the start (as
/// TensorBoard smooths), at the same x.
fn smoothed(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut average = 0.0;
    let mut weight = 0.0;
    points
        .iter()
        .map(|&(x, y)| {
            average = SMOOTHING * average + (1.0 - SMOOTHING) * y;
            weight = SMOOTHING * weight + (1.0 - SMOOTHING);
            (x, average / weight)
        })
        .collect()
}

/// This run's curves from its outcome, and the other mode's from what its own process
/// left in `out` (if it ran there).
fn curves(out: &Path, mode: Mode, outcome: &RunOutcome) -> Vec<Curves> {
    let other = match mode {
        Mode::Hybrid => Mode::Full,
        Mode::Full => Mode::Hybrid,
    };
    let earlier = RunDir::existing(out, other.name()).history().unwrap_or_else(|err| {
        eprintln!("warning: the {} run in {} is left out of the plot: {err}", other.name(), out.display());
        Default::default()
    });
    let mut runs = vec![
        Curves::new(mode, &outcome.records, &outcome.validations),
        Curves::new(other, &earlier.records, &earlier.validations),
    ];
    runs.sort_by_key(|run| run.as_ref().map(|r| r.mode != "hybrid"));
    runs.into_iter().flatten().collect()
}

/// Loss against step (top: each run's raw train loss, faint, under its smoothed line, its
/// validation loss, and a rug of the steps its predict phase ran or rolled back), loss
/// against training seconds (middle: hybrid's promise is time), and memory against step
/// (bottom: device memory in use and the pool's reserve, or the process's resident memory
/// where the backend has no pool) for every run in `runs`, written as SVG to `path`;
/// returns the modes drawn.
fn write_plot(runs: &[Curves], path: &Path, model: &str) -> Result<Vec<&'static str>, Box<dyn std::error::Error>> {
    if runs.is_empty() {
        return Err("no metrics to plot".into());
    }
    let max_step = runs.iter().flat_map(|r| r.train.iter().map(|p| p.0)).fold(1.0, f64::max);
    let max_seconds = runs.iter().flat_map(|r| r.train_by_time.iter().chain(&r.validation_by_time).map(|p| p.0));
    let max_seconds = max_seconds.fold(1e-3, f64::max);
    let losses = runs.iter().flat_map(|r| r.train.iter().chain(&r.validation).map(|p| p.1));
    let (low, high) = losses.fold((f64::MAX, f64::MIN), |(lo, hi), l| (lo.min(l), hi.max(l)));
    let (low, high) = (low * 0.95, high * 1.02);
    // Device memory where any run has it; otherwise the process's resident memory, labelled
    // as host memory (the two are never drawn on one axis).
    let has_device = runs.iter().any(|r| !r.memory_mib.is_empty());
    let has_host = runs.iter().any(|r| !r.host_mib.is_empty());
    let memory = |run: &Curves| if has_device { run.memory_mib.clone() } else { run.host_mib.clone() };
    let drawn = |r: &Curves| memory(r).into_iter().chain(r.reserved_mib.clone()).chain(r.in_step_mib.clone());
    let has_in_step = runs.iter().any(|r| !r.in_step_mib.is_empty());
    let max_mib = runs.iter().flat_map(|r| drawn(r).map(|p| p.1)).fold(1.0, f64::max);

    // Whole steps on the step axes; two decimals elsewhere (so no label reads "500.0").
    let whole = |x: &f64| format!("{x:.0}");
    let loss_label = |y: &f64| format!("{y:.2}");
    let seconds_label = move |x: &f64| if max_seconds >= 10.0 { format!("{x:.0}") } else { format!("{x:.2}") };
    let step_ticks = (max_step as usize).clamp(1, 10);

    let root = SVGBackend::new(path, (900, 1000)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, rest) = root.split_vertically(400);
    let (middle, bottom) = rest.split_vertically(330);
    let mut loss_chart = ChartBuilder::on(&top)
        .caption(format!("{model}: loss against step"), ("sans-serif", 20))
        .margin(10)
        .margin_right(30)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..max_step, low..high)?;
    loss_chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("loss")
        .x_labels(step_ticks)
        .x_label_formatter(&whole)
        .y_label_formatter(&loss_label)
        .draw()?;
    let mut time_chart = ChartBuilder::on(&middle)
        .caption("loss against training seconds", ("sans-serif", 16))
        .margin(10)
        .margin_right(30)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..max_seconds, low..high)?;
    time_chart
        .configure_mesh()
        .x_desc("training seconds after the first step")
        .y_desc("loss")
        .x_label_formatter(&seconds_label)
        .y_label_formatter(&loss_label)
        .draw()?;
    let memory_caption = match (has_device, has_host) {
        (true, _) if has_in_step => {
            "device memory: in use after each step, its peak inside the step, the pool's reserve (MiB)"
        }
        (true, _) => "device memory: in use after each step, and the pool's reserve (MiB)",
        (false, true) => "host memory, process resident (MiB); no device pool on this backend",
        (false, false) => "device memory in use: not available on this backend",
    };
    let mut memory_chart = ChartBuilder::on(&bottom)
        .caption(memory_caption, ("sans-serif", 16))
        .margin(10)
        .margin_right(30)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..max_step, 0.0..max_mib * 1.1)?;
    memory_chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("MiB")
        .x_labels(step_ticks)
        .x_label_formatter(&whole)
        .y_label_formatter(&whole)
        .draw()?;

    // The rug of predicted steps sits at the bottom of the loss panel.
    let rug = |step: f64, height: f64, style: ShapeStyle| {
        PathElement::new(vec![(step, low), (step, low + (high - low) * height)], style)
    };
    for (index, run) in runs.iter().enumerate() {
        let colour = Palette99::pick(index * 2).to_rgba();
        for (chart, train, validation) in [
            (&mut loss_chart, &run.train, &run.validation),
            (&mut time_chart, &run.train_by_time, &run.validation_by_time),
        ] {
            chart.draw_series(LineSeries::new(train.iter().copied(), colour.mix(0.2)))?;
            chart
                .draw_series(LineSeries::new(smoothed(train), colour.mix(0.8)))?
                .label(format!("{} train (smoothed; raw faint)", run.mode))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.mix(0.8)));
            chart
                .draw_series(LineSeries::new(validation.iter().copied(), colour.stroke_width(2)))?
                .label(format!("{} validation", run.mode))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
        }
        if !run.predicted.is_empty() {
            let style = colour.stroke_width(1);
            loss_chart
                .draw_series(run.predicted.iter().map(|&step| rug(step, 0.04, style)))?
                .label(format!("{}: predicted steps", run.mode))
                .legend(move |(x, y)| PathElement::new(vec![(x + 10, y - 5), (x + 10, y + 5)], style));
        }
        if !run.rolled_back.is_empty() {
            let style = RED.stroke_width(2);
            loss_chart
                .draw_series(run.rolled_back.iter().map(|&step| rug(step, 0.08, style)))?
                .label(format!("{}: rolled-back blocks", run.mode))
                .legend(move |(x, y)| PathElement::new(vec![(x + 10, y - 5), (x + 10, y + 5)], style));
        }
        let in_use = if has_device { format!("{} in use", run.mode) } else { run.mode.to_string() };
        memory_chart
            .draw_series(LineSeries::new(memory(run), colour))?
            .label(in_use)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
        if has_device {
            // The reserve holds the steps' in-step peak (activations are freed by the time
            // a step's sample is read): what the device lends the pool, as nvidia-smi sees it.
            let dashed = colour.mix(0.5).stroke_width(2);
            memory_chart
                .draw_series(LineSeries::new(run.reserved_mib.clone(), dashed))?
                .label(format!("{} reserved", run.mode))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], dashed));
        }
        if !run.in_step_mib.is_empty() {
            // What the steps hold at once (read during them): the reserve above it is the
            // pool's own overhead, below it the pool could not have served the step.
            let thin = colour.mix(0.7).stroke_width(1);
            memory_chart
                .draw_series(LineSeries::new(run.in_step_mib.clone(), thin))?
                .label(format!("{} in-step peak", run.mode))
                .legend(move |(x, y)| PathElement::new(vec![(x, y - 3), (x + 20, y - 3)], thin));
        }
    }
    for chart in [&mut loss_chart, &mut time_chart] {
        chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;
    }
    memory_chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;
    root.present()?;
    Ok(runs.iter().map(|r| r.mode).collect())
}

/// Writes the plot of this run (`mode`, `outcome`) and of the other mode's run in `out`,
/// if there is one, into `out` as `<file_stem>.svg`, and says where, or warns why not.
pub fn plot_runs(out: &Path, mode: Mode, outcome: &RunOutcome, file_stem: &str, model: &str) {
    let plot = out.join(format!("{file_stem}.svg"));
    match write_plot(&curves(out, mode, outcome), &plot, model) {
        Ok(modes) => println!("plot: {} ({})", plot.display(), modes.join(" and ")),
        Err(err) => eprintln!("warning: no plot written: {err}"),
    }
}
