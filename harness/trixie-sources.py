#!/usr/bin/env python3
"""harness/trixie-sources.py OUT TYPE: writes a deb822 apt source for Debian trixie (TYPE `deb` or
`deb-src`) derived from this machine's bookworm source (its mirror and keyring), for a private
apt configuration (harness/softroce.sh: trixie's binary rdma-core for the guest;
harness/rdma-core-56.sh: trixie's rdma-core source). Exit 1 when no bookworm source is found."""
import pathlib
import re
import sys

out, kind = sys.argv[1], sys.argv[2]
stanzas = []
deb822 = pathlib.Path('/etc/apt/sources.list.d/debian.sources')
if deb822.exists():
    for st in deb822.read_text().split('\n\n'):
        m = re.search(r'^Suites:\s*(.*)$', st, re.M)
        if m and 'bookworm' in m.group(1).split():
            st = re.sub(r'^Suites:.*$', 'Suites: trixie', st, flags=re.M)
            st = re.sub(r'^Types:.*$', 'Types: ' + kind, st, flags=re.M)
            stanzas.append(st.strip())
else:
    for line in pathlib.Path('/etc/apt/sources.list').read_text().splitlines():
        f = line.split()
        if len(f) >= 4 and f[0] in ('deb', 'deb-src') and 'bookworm' in f:
            uri = [x for x in f[1:] if '://' in x][0]
            stanzas.append('Types: %s\nURIs: %s\nSuites: trixie\nComponents: main\n'
                           'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' % (kind, uri))
            break
if not stanzas:
    sys.exit(1)
open(out, 'w').write('\n\n'.join(stanzas) + '\n')
