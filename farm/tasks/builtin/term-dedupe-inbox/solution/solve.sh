#!/bin/bash
# Reference solution: shell tools only (find, sha256sum, sort).
set -euo pipefail
export LC_ALL=C
cd /app/inbox
rm -rf /app/library
mkdir -p /app/library
work=$(mktemp -d)
# "<sha> <path>" for every non-empty file, by path.
find . -type f -size +0 -printf '%P\0' | sort -z | xargs -0 sha256sum -- > "$work/sums"
declare -A kept_for_sha dest_taken paths_for_sha
while IFS= read -r line; do
  sha=${line%% *}
  path=${line#* }; path=${path# }
  paths_for_sha[$sha]="${paths_for_sha[$sha]:+${paths_for_sha[$sha]},}$path"
  [ -n "${kept_for_sha[$sha]:-}" ] && continue
  name=$(basename -- "$path")
  stem=${name%.*}; ext=${name##*.}
  if [[ $name != *.* || -z $stem || -z $ext ]]; then folder=other; else folder=${ext,,}; fi
  n=1
  while :; do
    if [ $n -eq 1 ]; then candidate=$name
    elif [ $folder = other ]; then candidate="$name-$n"
    else candidate="$stem-$n.$ext"; fi
    [ -z "${dest_taken[$folder/$candidate]:-}" ] && break
    n=$((n + 1))
  done
  dest_taken[$folder/$candidate]=1
  kept_for_sha[$sha]="$folder/$candidate"
  mkdir -p "/app/library/$folder"
  cp -- "$path" "/app/library/$folder/$candidate"
done < "$work/sums"
for sha in "${!kept_for_sha[@]}"; do
  printf '%s\t%s\t%s\n' "$sha" "${kept_for_sha[$sha]}" "${paths_for_sha[$sha]}"
done | sort -t $'\t' -k2,2 > /app/library/manifest.tsv
rm -rf "$work"
