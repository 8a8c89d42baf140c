package io.ckguard.flinkjob;

import org.apache.flink.contrib.streaming.state.RocksDBOptionsFactory;

/** The RocksDB tuning as Flink 1.x names its options factory. See {@link NoCompaction}. */
public class NoCompactionOptions extends NoCompaction implements RocksDBOptionsFactory {
  private static final long serialVersionUID = 1L;
}
