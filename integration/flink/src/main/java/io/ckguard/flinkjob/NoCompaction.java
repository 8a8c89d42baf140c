package io.ckguard.flinkjob;

import java.io.Serializable;
import java.util.Collection;
import org.rocksdb.ColumnFamilyOptions;
import org.rocksdb.DBOptions;

/**
 * The RocksDB options factory's body, shared by both Flink lines: Flink's RocksDBOptionsFactory
 * interface moved package in 2.0, so each line's NoCompactionOptions (src/flink1, src/flink2) only
 * names its interface and inherits these methods. See {@link RocksTuning}.
 */
abstract class NoCompaction implements Serializable {
  private static final long serialVersionUID = 1L;

  public DBOptions createDBOptions(DBOptions current, Collection<AutoCloseable> handles) {
    return current;
  }

  public ColumnFamilyOptions createColumnOptions(
      ColumnFamilyOptions current, Collection<AutoCloseable> handles) {
    return RocksTuning.apply(current);
  }
}
