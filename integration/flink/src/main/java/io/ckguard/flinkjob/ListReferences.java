package io.ckguard.flinkjob;

import java.io.BufferedInputStream;
import java.io.DataInputStream;
import java.io.File;
import java.io.FileInputStream;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.Collection;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import org.apache.flink.runtime.checkpoint.Checkpoints;
import org.apache.flink.runtime.checkpoint.OperatorState;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.metadata.CheckpointMetadata;
import org.apache.flink.runtime.state.filemerging.DirectoryStreamStateHandle;
import org.apache.flink.runtime.state.filemerging.SegmentFileStateHandle;
import org.apache.flink.runtime.state.filesystem.FileStateHandle;
import org.apache.flink.runtime.state.filesystem.RelativeFileStateHandle;
import org.apache.flink.runtime.state.memory.ByteStreamStateHandle;
import org.apache.flink.runtime.util.EnvironmentInformation;

/**
 * Loads a {@code _metadata} with Flink's own {@code Checkpoints.loadCheckpointMetadata} and prints,
 * as one JSON object, every storage object Flink's handles name: file handles (absolute), relative
 * handles (resolved by Flink against the folder of the {@code _metadata}), file-merging segments
 * (physical file + offset + length), file-merging directory handles, and changelog (DSTL) files.
 * Inline byte handles are counted, never listed.
 *
 * <p>The handle tree is walked generically (every field of every Flink object below an operator's
 * subtask state, plus collections, maps and optionals), so handle containers that differ between
 * Flink versions need no code here; only the leaves are named. Usage: {@code ListReferences
 * /path/to/_metadata [...]}; several files print one JSON object per line; a file that does not
 * exist (any more) prints {@code {"metadata": path, "missing": true}}.
 */
public final class ListReferences {
  private ListReferences() {}

  private static final class Ref {
    String kind;
    String path;
    String relative;
    long offset;
    long length;
    String operatorId;
    int subtask;
    String handle;
  }

  private final Map<String, Ref> refs = new LinkedHashMap<>();
  private final Map<String, Integer> handleCounts = new TreeMap<>();
  private final IdentityHashMap<Object, Boolean> seen = new IdentityHashMap<>();
  private long inlineBytes;
  private String operatorId;
  private int subtask;

  public static void main(String[] args) throws Exception {
    if (args.length == 0) {
      System.err.println("usage: ListReferences /path/to/_metadata ...");
      System.exit(2);
    }
    for (String a : args) {
      File f = new File(a).getAbsoluteFile();
      if (!f.exists()) {
        // A running job may subsume (delete) a checkpoint between listing and reading it.
        System.out.println("{\"metadata\":" + q(f.getPath()) + ",\"missing\":true}");
        continue;
      }
      System.out.println(new ListReferences().run(f));
    }
  }

  String run(File metadata) throws Exception {
    CheckpointMetadata md;
    try (DataInputStream in =
        new DataInputStream(new BufferedInputStream(new FileInputStream(metadata)))) {
      // The external pointer is the checkpoint folder, as Flink passes it on restore; relative
      // handles are resolved against it.
      md =
          Checkpoints.loadCheckpointMetadata(
              in, ListReferences.class.getClassLoader(), metadata.getParentFile().toURI().toString());
    }
    int operators = 0;
    for (OperatorState op : md.getOperatorStates()) {
      operators++;
      operatorId = op.getOperatorID().toHexString();
      subtask = -1;
      walk(op.getCoordinatorState(), 0);
      for (Map.Entry<Integer, OperatorSubtaskState> e : op.getSubtaskStates().entrySet()) {
        subtask = e.getKey();
        walk(e.getValue(), 0);
      }
    }
    StringBuilder sb = new StringBuilder();
    sb.append("{\"flinkVersion\":").append(q(EnvironmentInformation.getVersion()));
    sb.append(",\"metadata\":").append(q(metadata.getPath()));
    sb.append(",\"checkpointId\":").append(md.getCheckpointId());
    sb.append(",\"operators\":").append(operators);
    sb.append(",\"inlineBytes\":").append(inlineBytes);
    sb.append(",\"handleCounts\":{");
    boolean first = true;
    for (Map.Entry<String, Integer> e : handleCounts.entrySet()) {
      sb.append(first ? "" : ",").append(q(e.getKey())).append(':').append(e.getValue());
      first = false;
    }
    sb.append("},\"references\":[");
    first = true;
    for (Ref r : refs.values()) {
      sb.append(first ? "\n" : ",\n");
      first = false;
      sb.append("{\"kind\":").append(q(r.kind));
      sb.append(",\"path\":").append(q(r.path));
      if (r.relative != null) {
        sb.append(",\"relative\":").append(q(r.relative));
      }
      sb.append(",\"offset\":").append(r.offset).append(",\"length\":").append(r.length);
      sb.append(",\"operatorId\":").append(q(r.operatorId)).append(",\"subtask\":").append(r.subtask);
      sb.append(",\"handle\":").append(q(r.handle)).append('}');
    }
    sb.append("\n]}");
    return sb.toString();
  }

  private void add(String kind, String path, String relative, long offset, long length, Object h) {
    String key = kind + "\u0000" + path + "\u0000" + offset + "\u0000" + length;
    if (refs.containsKey(key)) {
      return;
    }
    Ref r = new Ref();
    r.kind = kind;
    r.path = path;
    r.relative = relative;
    r.offset = offset;
    r.length = length;
    r.operatorId = operatorId;
    r.subtask = subtask;
    r.handle = h.getClass().getSimpleName();
    refs.put(key, r);
  }

  private void walk(Object o, int depth) throws IllegalAccessException {
    if (o == null || depth > 64) {
      return;
    }
    if (o instanceof Collection) {
      for (Object x : (Collection<?>) o) {
        walk(x, depth + 1);
      }
      return;
    }
    if (o instanceof Map) {
      for (Map.Entry<?, ?> e : ((Map<?, ?>) o).entrySet()) {
        walk(e.getKey(), depth + 1);
        walk(e.getValue(), depth + 1);
      }
      return;
    }
    if (o instanceof Optional) {
      walk(((Optional<?>) o).orElse(null), depth + 1);
      return;
    }
    if (o instanceof Object[]) {
      for (Object x : (Object[]) o) {
        walk(x, depth + 1);
      }
      return;
    }
    Class<?> c = o.getClass();
    if (!c.getName().startsWith("org.apache.flink.") || c.isEnum()) {
      return;
    }
    if (seen.put(o, Boolean.TRUE) != null) {
      return;
    }
    if (c.getName().contains(".state.") || c.getName().contains(".checkpoint.")) {
      if (o instanceof org.apache.flink.runtime.state.StateObject) {
        handleCounts.merge(c.getSimpleName(), 1, Integer::sum);
      }
    }
    // Leaves: the handles that name storage objects, and the inline one.
    if (o instanceof RelativeFileStateHandle) {
      RelativeFileStateHandle h = (RelativeFileStateHandle) o;
      add("relative", h.getFilePath().toString(), h.getRelativePath(), 0, h.getStateSize(), h);
      return;
    }
    if (o instanceof FileStateHandle) {
      FileStateHandle h = (FileStateHandle) o;
      add("file", h.getFilePath().toString(), null, 0, h.getStateSize(), h);
      return;
    }
    if (o instanceof SegmentFileStateHandle) {
      SegmentFileStateHandle h = (SegmentFileStateHandle) o;
      if (h.getFilePath() != null && !c.getSimpleName().startsWith("Empty")) {
        add("segment", h.getFilePath().toString(), null, h.getStartPos(), h.getStateSize(), h);
      }
      return;
    }
    if (o instanceof DirectoryStreamStateHandle) {
      DirectoryStreamStateHandle h = (DirectoryStreamStateHandle) o;
      add("directory", h.getDirectory().toString(), null, 0, 0, h);
      return;
    }
    if (o instanceof ByteStreamStateHandle) {
      inlineBytes += ((ByteStreamStateHandle) o).getData().length;
      return;
    }
    if (o instanceof org.apache.flink.core.fs.Path) {
      return;
    }
    for (Class<?> k = c; k != null && k != Object.class; k = k.getSuperclass()) {
      for (Field f : k.getDeclaredFields()) {
        if (Modifier.isStatic(f.getModifiers()) || f.getType().isPrimitive()) {
          continue;
        }
        f.setAccessible(true);
        walk(f.get(o), depth + 1);
      }
    }
  }

  static String q(String s) {
    if (s == null) {
      return "null";
    }
    StringBuilder b = new StringBuilder("\"");
    for (char ch : s.toCharArray()) {
      switch (ch) {
        case '"':
          b.append("\\\"");
          break;
        case '\\':
          b.append("\\\\");
          break;
        default:
          if (ch < 0x20) {
            b.append(String.format("\\u%04x", (int) ch));
          } else {
            b.append(ch);
          }
      }
    }
    return b.append('"').toString();
  }
}
