"""Trace loaders and cluster specs: real cluster traces in, Workloads and Clusters out.

  load_workload(path, fmt="auto")  Philly job log, Gavel traces, Alibaba pod list, canonical CSV,
                                   or a bundled sample ('sample:gavel', 'sample:philly')
  load_cluster(spec)               '16x8', '9x4:v100,9x4:p100', a YAML file, 'philly', 'alibaba'
  write_csv(jobs, path)            export any workload as canonical CSV
"""

from loadmaster.traces.canonical import read_csv, write_csv
from loadmaster.traces.clusters import ClusterSpecError, load_cluster
from loadmaster.traces.errors import TraceFormatError
from loadmaster.traces.formats import FORMATS, detect_format, load_workload
from loadmaster.traces.samples import SAMPLES

__all__ = [
    "FORMATS",
    "SAMPLES",
    "ClusterSpecError",
    "TraceFormatError",
    "detect_format",
    "load_cluster",
    "load_workload",
    "read_csv",
    "write_csv",
]
