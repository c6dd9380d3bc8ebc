"""scalelab from Python and Jupyter: submit experiments to a scalelab server, wait for them, and read their results
as pandas DataFrames.

    import scalelab
    experiment = scalelab.connect().submit("examples/experiment.json")
    frame = experiment.wait().scaling()      # a row per series and GPU count: time, 95 % interval, speed-up...

connect(url=None, token=None) finds the server as the `scalelab` command does: the arguments, else SCALELAB_URL and
SCALELAB_TOKEN, else the config file ~/.config/scalelab/config.toml, else http://127.0.0.1:8000. It returns a Lab:
  lab.submit(request or path)  a request as a dict, or a TOML or JSON file; returns an Experiment
  lab.experiment(id)           an experiment submitted earlier
  lab.experiments()            the experiments this token may see, newest first
scalelab.submit, scalelab.experiment and scalelab.experiments do the same on the last connection.

An Experiment:
  .wait(progress=True)         until every run has ended and been read (a progress bar in Jupyter and terminals)
  .runs()                      DataFrame: a row per run (state, Slurm job, times)
  .compare()                   DataFrame: a row per run's figures (epoch time, speed-up, efficiency, loss, flags)
  .scaling()                   DataFrame: a row per point (series, GPUs: mean time, 95 % interval, speed-up)
  .report(path)                the report, one HTML file that opens offline
  .cancel(), .refresh()        cancel the runs not ended; read the experiment again

The DataFrames need pandas: pip install 'scalelab[notebook]'. Errors are the command's kinds, all ClientError:
ServerUnreachable (the command's exit 3), TokenRejected (4), NotFound (5), Invalid (2; `locations()` names the
fields), Conflict, Unavailable (HTTP 503: later), ApiError (any other), BadUrl; a config or experiment file that
cannot be read is UsageError. examples/scaling.ipynb is a notebook that uses all of it.
"""

from client.api import (
    ApiError,
    BadUrl,
    ClientError,
    Conflict,
    Invalid,
    NotFound,
    ServerUnreachable,
    TokenRejected,
    Unavailable,
)
from client.command import UsageError
from scalelab._experiment import Experiment
from scalelab.lab import Lab, connect, experiment, experiments, submit

__all__ = [
    "ApiError",
    "BadUrl",
    "ClientError",
    "Conflict",
    "Experiment",
    "Invalid",
    "Lab",
    "NotFound",
    "ServerUnreachable",
    "TokenRejected",
    "Unavailable",
    "UsageError",
    "connect",
    "experiment",
    "experiments",
    "submit",
]
