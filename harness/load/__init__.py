"""The load's shape: durations, stages and arrival times (shapes), several
kernels at once and how the load is split between them (kernels), and the
resource sampler that watches the target while the load runs. Pure functions
and one sampler: uses nothing of the harness but ``harness.errors``."""

from .. import surface

__all__, __getattr__ = surface(__name__, {
    "kernels": ("check_kernel_names", "check_split", "check_weights", "command_name", "schedule", "split", "unique_names"),
    "sampler": ("Sampler",),
    "shapes": ("DURATION_HELP", "MAX_RUN_S", "Ramp", "arrival_offsets", "duration_parser", "follow_level", "parse_stages"),
})
