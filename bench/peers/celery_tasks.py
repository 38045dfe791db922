"""The Celery app of celery_bench.py: one no-op task, the work toolpool's
plugin `noop` does. Broker and result backend: the Redis at $CELERY_REDIS
(a redis+socket:// URL)."""
import os

from celery import Celery

app = Celery("celery_tasks", broker=os.environ["CELERY_REDIS"], backend=os.environ["CELERY_REDIS"])
app.conf.update(
    task_time_limit=5,              # the hard per-call limit, like toolpool's timeout 5 s
    worker_prefetch_multiplier=4,
    result_expires=3600,
    broker_connection_retry_on_startup=True,
)


@app.task(name="noop")
def noop(args):
    return {}
