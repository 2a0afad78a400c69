"""Results tables from run records and benchmark CSVs (pandas).

- `load`: run records -> one DataFrame with typed and derived columns (data, GPU sharing, chance);
- `bench`: `lra bench models` CSVs -> one DataFrame;
- `aggregate`: runs -> cells (one run per seed; mean, std and n over seeds);
- `setting`: where a cell of runs departs from the paper's setting;
- `scope`: what a set of runs is (presets, devices, Triton interpreter), the line heading each table;
- `record`, `accuracy`, `efficiency`: the tables (the LRA table of record; the papers' accuracy
  layout; throughput and memory per length), each a tidy numeric summary (`--format csv`) and
  display sections; `headline`: the table of record's compact view (attention x task); `steps`: the
  model-step benchmark's compact view (batch and mode x length); `kernels`: `lra bench kernels` CSVs
  and the dense and block-sparse kernels' headlines (ranges over N per head dim and pass);
- `render`: display sections as Markdown or LaTeX, summaries as CSV;
- `format`: cell formatting shared with the plots.

Standard deviations are sample standard deviations over seeds (ddof=1), so one seed has none.
"""
from lra.table.accuracy import accuracy_sections, accuracy_summary
from lra.table.bench import BENCH_COLUMNS, load_bench, load_bench_frame, read_csv_file
from lra.table.efficiency import EFFICIENCY_COLUMNS, efficiency_sections, efficiency_summary
from lra.table.headline import HEADLINE_COLUMNS, headline_sections, headline_summary
from lra.table.kernels import KERNEL_COLUMNS, block_sparse_ranges, kernel_ranges, kernel_sections, load_kernels
from lra.seq_len import parse_seq_len
from lra.table.format import NO_VALUE, format_duration, format_rate, format_seq_len, is_missing
from lra.table.load import filter_frame, load_run_records, normalise_records
from lra.table.record import RECORD_COLUMNS, record_sections, record_summary
from lra.table.render import FORMATS, Section, latex_escape, render, to_csv
from lra.table.scope import scope_line
from lra.table.steps import STEPS_COLUMNS, steps_sections, steps_summary

__all__ = [
    "BENCH_COLUMNS", "EFFICIENCY_COLUMNS", "FORMATS", "HEADLINE_COLUMNS", "KERNEL_COLUMNS", "NO_VALUE",
    "RECORD_COLUMNS", "STEPS_COLUMNS", "accuracy_sections", "accuracy_summary", "efficiency_sections",
    "block_sparse_ranges", "efficiency_summary", "filter_frame", "format_duration", "format_rate",
    "format_seq_len", "headline_sections", "headline_summary", "is_missing", "kernel_ranges", "kernel_sections",
    "latex_escape",
    "load_bench", "load_bench_frame", "load_kernels", "load_run_records", "normalise_records", "parse_seq_len",
    "read_csv_file", "record_sections", "record_summary", "render", "scope_line", "Section", "steps_sections",
    "steps_summary", "to_csv",
]
