package io.ckguard.flinkjob;

import org.apache.flink.api.java.functions.KeySelector;

/** Spreads the sequence numbers over a bounded key space so state size stays bounded. */
final class KeyOf implements KeySelector<Long, Long> {
  private static final long serialVersionUID = 1L;
  private final int keys;

  KeyOf(int keys) {
    this.keys = keys;
  }

  @Override
  public Long getKey(Long n) {
    // A multiplicative hash so consecutive numbers land on unrelated keys (and key groups).
    return Math.floorMod(n * 0x9E3779B97F4A7C15L, (long) keys);
  }
}
