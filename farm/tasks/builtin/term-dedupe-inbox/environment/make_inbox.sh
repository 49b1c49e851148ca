#!/bin/bash
# Creates the inbox tree for the dedupe task in directory $1 (deterministic content).
set -euo pipefail
root=$1
mkdir -p "$root/scans/2023" "$root/scans/2024" "$root/phone" "$root/misc/old stuff"
cd "$root"
put() { mkdir -p "$(dirname "$1")"; printf '%b' "$2" > "$1"; }
put "scans/2023/invoice-0042.pdf" '%PDF-1.4\ninvoice 42\ntotal 118.00\n'
put "scans/2024/invoice-0042 (copy).pdf" '%PDF-1.4\ninvoice 42\ntotal 118.00\n'
put "scans/2024/invoice-0043.PDF" '%PDF-1.4\ninvoice 43\ntotal 7.50\n'
put "phone/IMG_1001.JPG" '\xff\xd8\xff\xe0JFIF beach\n'
put "phone/IMG_1002.jpg" '\xff\xd8\xff\xe0JFIF dunes\n'
put "phone/IMG_1001 2.JPG" '\xff\xd8\xff\xe0JFIF beach\n'
put "misc/beach.jpeg" '\xff\xd8\xff\xe0JFIF beach\n'
put "misc/notes.txt" 'buy milk\ncall bank\n'
put "misc/old stuff/notes.txt" 'old notes\n'
put "misc/old stuff/Notes.TXT" 'buy milk\ncall bank\n'
put "misc/README" 'no extension here\n'
put "misc/.hidden" 'dotfile without extension\n'
put "misc/archive.tar.gz" '\x1f\x8b\x08\x00fake tarball\n'
put "misc/empty.txt" ''
put "misc/also-empty.log" ''
put "phone/recording 1.m4a" 'ftypM4A voice memo 1\n'
put "phone/recording 2.M4A" 'ftypM4A voice memo 2\n'
put "scans/2023/notes.txt" 'scan notes 2023\n'
put "scans/2024/notes.txt" 'scan notes 2024\n'
put "scans/2024/notes.TXT" 'scan notes 2023\n'
put "misc/data.csv" 'a,b\n1,2\n'
put "misc/old stuff/data.csv" 'a,b\n1,2\n'
put "misc/trailing.dot." 'name ends with a dot\n'
