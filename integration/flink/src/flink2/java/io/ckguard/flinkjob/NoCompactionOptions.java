package io.ckguard.flinkjob;

import org.apache.flink.state.rocksdb.RocksDBOptionsFactory;

/** The RocksDB tuning as Flink 2.x (the interface's package since 2.0) names its options factory. See {@link NoCompaction}. */
public class NoCompactionOptions extends NoCompaction implements RocksDBOptionsFactory {
  private static final long serialVersionUID = 1L;
}
