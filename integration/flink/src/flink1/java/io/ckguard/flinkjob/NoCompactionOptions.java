package io.ckguard.flinkjob;

import java.util.Collection;
import org.apache.flink.contrib.streaming.state.RocksDBOptionsFactory;
import org.rocksdb.ColumnFamilyOptions;
import org.rocksdb.DBOptions;

/**
 * Flink 1.x flavour of the RocksDB tuning (the interface moved package in 2.0). See {@link RocksTuning}.
 */
public class NoCompactionOptions implements RocksDBOptionsFactory {
  private static final long serialVersionUID = 1L;

  @Override
  public DBOptions createDBOptions(DBOptions current, Collection<AutoCloseable> handles) {
    return current;
  }

  @Override
  public ColumnFamilyOptions createColumnOptions(
      ColumnFamilyOptions current, Collection<AutoCloseable> handles) {
    return RocksTuning.apply(current);
  }
}
