package io.ckguard.flinkjob;

import java.util.Collection;
import org.apache.flink.state.rocksdb.RocksDBOptionsFactory;
import org.rocksdb.ColumnFamilyOptions;
import org.rocksdb.DBOptions;

/**
 * Flink 2.x flavour of the RocksDB tuning (org.apache.flink.state.rocksdb since 2.0). See {@link RocksTuning}.
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
