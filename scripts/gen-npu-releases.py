#!/usr/bin/env python3
"""Write src/conf/npu_releases.inc: what each torch_npu release's allocator-settings parser accepts.

Usage: scripts/gen-npu-releases.py CLONE > src/conf/npu_releases.inc
CLONE is a git clone of https://gitee.com/ascend/pytorch (mirrored at github.com/Ascend/pytorch)
with its tags. For every release tag (alphas, betas and 0-day builds left out except the newest
line) it reads the torch_npu version (setup.py VERSION or version.txt) and, from
torch_npu/csrc/core/npu/NPUCachingAllocator.{cpp,h} and NPUAllocatorConfig.{cpp,h}:

  keys        the setting keys that release's parser names (string literals of known keys)
  combo       how `max_split_size_mb`/`garbage_collection_threshold` with expandable segments
              is treated: 0 no check; 1 checked after the virtual-memory probe inside
              parseExpandableSegments (a device without virtual memory turns expandable
              segments off first, so the string is accepted); 2 checked before the probe
              (refused on every device)
  split_gt    max_split_size_mb must be > 20 (else >= 20 / >= large_segment_size_mb)
  split_digit max_split_size_mb must be all digits (isDigit), else std::stoi reads a prefix
  tokenizer   the whole string is read by c10's ConfigTokenizer (every isspace dropped, a wrong
              separator not noticed) rather than lexArgs/consumeToken (only ' ' dropped,
              separators enforced)
  alloc_conf  PYTORCH_ALLOC_CONF is read too (both set: refused)
  warn_probe  the constructor probes virtual memory and prints "expandable_segments feature is
              not supportted ..." when it fails
  seg_page    what segment_size_mb sizes: 0 the release has no such key; 1 the page of the large
              pool's expandable segments (its own member, m_segment_size_mb, read where the segment
              is made: "custom_segment_size"); 2 that page unless large_segment_size_mb is set
              (get_custom_expandable_segment_size), with torch_npu's deprecation warnings. Never the
              size of a whole segment: the script stops if get_allocation_size names it.

HEAD is written as the newest entry under the first version its version.txt lists.
"""
import re
import subprocess
import sys

KEYS = [
    "max_split_size_mb", "garbage_collection_threshold", "expandable_segments", "roundup_power2_divisions",
    "base_addr_aligned_kb", "page_size", "segment_size_mb", "large_segment_size_mb", "max_non_split_rounding_mb",
    "pinned_use_background_threads", "pin_memory_expandable_segments", "pinned_mem_register",
    "multi_stream_lazy_reclaim", "per_process_memory_fraction", "pinned_reserve_segment_size_mb",
    "release_lock_on_npumalloc", "throw_on_npumalloc_oom", "pinned_max_round_threshold_mb",
    "pinned_max_cached_size_mb", "align_hugepages",
]
FILES = re.compile(r"torch_npu/csrc/core/npu/(NPUAllocatorConfig|NPUCachingAllocator)\.(cpp|h)$")


def git(clone, *args):
    return subprocess.run(["git", "-C", clone, *args], capture_output=True, text=True, check=False).stdout


def version_of(clone, ref):
    for line in git(clone, "show", f"{ref}:version.txt").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            return line
    m = re.search(r"VERSION = '([^']+)'", git(clone, "show", f"{ref}:setup.py"))
    return m.group(1) if m else None


def function_body(src, name):
    m = re.search(name + r"\([^)]*\)[^{;]*\{", src)
    if not m:
        return ""
    depth, i = 1, m.end()
    while i < len(src) and depth:
        depth += {"{": 1, "}": -1}.get(src[i], 0)
        i += 1
    return src[m.end():i]


def facts(clone, ref):
    files = [f for f in git(clone, "ls-tree", "-r", "--name-only", ref).split() if FILES.search(f)]
    src = "".join(git(clone, "show", f"{ref}:{f}") for f in files)
    keys = [k for k in KEYS if f'"{k}"' in src]
    expandable = function_body(src, r"::parseExpandableSegments")
    combo = 0
    if "cannot be enabled with" in src:
        combo = 1 if "AclrtReserveMemAddress" in expandable else 2
    split = function_body(src, r"CachingAllocatorConfig::parseMaxSplitSize")
    seg_page = 0
    if '"segment_size_mb"' in src:
        assert "segment_size_mb" not in function_body(src, r"get_allocation_size"), ref
        seg_page = 2 if "get_custom_expandable_segment_size" in src else 1
        assert "custom_segment_size" in src, ref
    return {
        "keys": keys,
        "combo": combo,
        "split_gt": "must be > " in split,
        "split_digit": "isDigit" in split,
        "tokenizer": "lexArgs" not in src and "ConfigTokenizer" in src,
        "alloc_conf": '"PYTORCH_ALLOC_CONF"' in src,
        "warn_probe": "feature is not supportted" in src,
        "seg_page": seg_page,
    }


def sort_key(version):
    parts = re.match(r"(\d+)\.(\d+)\.(\d+)(?:\.?(post|rc)(\d+))?", version)
    major, minor, patch, kind, n = parts.groups()
    return (int(major), int(minor), int(patch), {"rc": 0, None: 1, "post": 2}[kind], int(n or 0))


def main():
    clone = sys.argv[1]
    tags = [t for t in git(clone, "tag").split()
            if re.match(r"v(5|6|7|26)\.", t) and not re.search(r"alpha|beta|0day", t)]
    tags += [t for t in git(clone, "tag").split() if "0day" in t]
    rows = {}
    for tag in tags:
        v = version_of(clone, tag)
        if v and re.match(r"\d+\.\d+\.\d+", v):
            rows[v] = (tag, facts(clone, tag))
    head = version_of(clone, "HEAD")
    if head and head not in rows:
        rows[head] = ("master " + git(clone, "log", "-1", "--format=%h %cs", "HEAD").strip(), facts(clone, "HEAD"))
    print("/* Generated by scripts/gen-npu-releases.py from the tags of Ascend/pytorch; do not edit.")
    print(" * version, tag, keys the parser names, combo, split_gt, split_digit, tokenizer, alloc_conf, warn_probe,")
    print(" * seg_page */")
    for v in sorted(rows, key=sort_key):
        tag, f = rows[v]
        print('{"%s", "%s", "%s", %d, %d, %d, %d, %d, %d, %d},' % (
            v, tag, " ".join(f["keys"]), f["combo"], f["split_gt"], f["split_digit"], f["tokenizer"],
            f["alloc_conf"], f["warn_probe"], f["seg_page"]))


if __name__ == "__main__":
    main()
