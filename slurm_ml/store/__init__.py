"""The only code in slurm-ml that talks to PostgreSQL.

Use a ``Store`` (Protocol): ``PostgresStore`` for real, ``FakeStore`` in tests,
wrapped in a ``SpoolingStore`` wherever a write must survive a database outage.
Create or upgrade the schema with ``migrate``. The reconciler daemon acts only while
its ``PgLeaderLock`` (a session advisory lock) is held. Only the errors in
``slurm_ml.store.errors`` leave this package, never psycopg's.
"""

from slurm_ml.store.errors import (
    MigrationError,
    SpoolError,
    StoreError,
    StoreIntegrityError,
    StoreUnavailable,
)
from slurm_ml.store.fake import FakeStore
from slurm_ml.store.leader import (
    FakeLeaderLock,
    FakeLockTable,
    LeaderLock,
    PgLeaderLock,
    signed_lock_key,
)
from slurm_ml.store.migrate import MIGRATION_LOCK_KEY, Migration, load_migrations, migrate
from slurm_ml.store.offline import OfflineStore
from slurm_ml.store.postgres import PostgresStore
from slurm_ml.store.protocol import Store, WriteOutcome, write_record
from slurm_ml.store.records import (
    RECORD_TYPES,
    AuditEntry,
    BudgetSnapshot,
    GpuMemProfile,
    HealthEvent,
    JobGpuStats,
    ReconcilerDecision,
    Record,
    UtilSample,
    derive_key,
)
from slurm_ml.store.spool import DrainResult, Spool, SpoolingStore

__all__ = [
    "MIGRATION_LOCK_KEY",
    "RECORD_TYPES",
    "AuditEntry",
    "BudgetSnapshot",
    "DrainResult",
    "FakeLeaderLock",
    "FakeLockTable",
    "FakeStore",
    "GpuMemProfile",
    "HealthEvent",
    "JobGpuStats",
    "LeaderLock",
    "Migration",
    "MigrationError",
    "OfflineStore",
    "PgLeaderLock",
    "PostgresStore",
    "ReconcilerDecision",
    "Record",
    "Spool",
    "SpoolError",
    "SpoolingStore",
    "Store",
    "StoreError",
    "StoreIntegrityError",
    "StoreUnavailable",
    "UtilSample",
    "WriteOutcome",
    "derive_key",
    "load_migrations",
    "migrate",
    "signed_lock_key",
    "write_record",
]
