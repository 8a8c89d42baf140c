package io.ckguard.flinkjob;

import org.rocksdb.ColumnFamilyOptions;

/**
 * RocksDB column options for the e2e job. Automatic compaction is switched off so that every SST a
 * checkpoint uploads stays part of the live database: later checkpoints (and checkpoints of a job
 * restored from this one) keep referencing old SSTs by absolute path, exactly like the bottom-level
 * SSTs of a production job that are referenced for months. Without this, compaction of our tiny
 * key space would rewrite everything within seconds and cross-job references would vanish before
 * the test can look at them.
 */
final class RocksTuning {
  private RocksTuning() {}

  static ColumnFamilyOptions apply(ColumnFamilyOptions o) {
    if (!Boolean.getBoolean("ckguard.rocksdb.compaction")) {
      o.setDisableAutoCompactions(true);
      // Many L0 files would otherwise stall writes (defaults 20/36 files).
      o.setLevel0SlowdownWritesTrigger(1 << 20);
      o.setLevel0StopWritesTrigger(1 << 20);
    }
    return o;
  }
}
