"""One router per resource; ``ROUTERS`` is the order they are mounted in."""

from datahub.api.routes import commits, datasets, diff, leases, records, remote, system, tags, tasks, versions

ROUTERS = (
    system.router,
    datasets.router,
    versions.router,
    records.router,
    diff.router,
    commits.router,
    tags.router,
    remote.router,
    leases.router,
    tasks.router,
)
