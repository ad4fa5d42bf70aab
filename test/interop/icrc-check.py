#!/usr/bin/env python3
"""Verify the RoCEv2 ICRC of every UDP/4791 packet in pcap files (Ethernet link type).

tshark 4.0 (Debian bookworm) shows the "Invariant CRC" field but does not validate it, so this
does it independently, following the IBA RoCEv2 annex (and Linux rxe_icrc.c):
  CRC32 (Ethernet/zlib polynomial, init ~0, final xor ~0) over
    8 bytes 0xff (stand-in for the LRH)
    IPv4 header with TOS=0xff, TTL=0xff, header checksum=0xffff
      (IPv6: traffic class=0xff, flow label=0xfffff, hop limit=0xff)
    UDP header with checksum=0xffff
    BTH with byte 4 (F/B/resv, "resv8a") = 0xff
    rest of the IBA packet (extension headers, payload, pad), up to the 4 ICRC bytes
  ICRC on the wire = that CRC32 value in little-endian byte order (like an Ethernet FCS).
An IPv4 packet whose IP header checksum is wrong counts as bad too (the kernel would drop it).
Prints a line per file, a FLOW line per source and destination address over all files, and a
TOTAL line.
Usage: icrc-check.py [-v] file.pcap...     exit status 1 if any packet has a bad ICRC.
"""
import socket, struct, sys, zlib

OPS = {0: 'SEND_FIRST', 1: 'SEND_MIDDLE', 2: 'SEND_LAST', 3: 'SEND_LAST_IMM', 4: 'SEND_ONLY',
       5: 'SEND_ONLY_IMM', 6: 'WRITE_FIRST', 7: 'WRITE_MIDDLE', 8: 'WRITE_LAST',
       9: 'WRITE_LAST_IMM', 10: 'WRITE_ONLY', 11: 'WRITE_ONLY_IMM', 12: 'READ_REQ',
       13: 'READ_RESP_FIRST', 14: 'READ_RESP_MIDDLE', 15: 'READ_RESP_LAST', 16: 'READ_RESP_ONLY',
       17: 'ACK', 18: 'ATOMIC_ACK', 19: 'CMP_SWAP', 20: 'FETCH_ADD', 22: 'SEND_LAST_INV',
       23: 'SEND_ONLY_INV'}
TRANSPORT = {0: 'RC', 1: 'UC', 2: 'RD', 3: 'UD', 4: 'CNP', 5: 'XRC'}


def opname(op):
    t = op >> 5
    if op == 0x81:
        return 'CNP'
    return '%s_%s' % (TRANSPORT.get(t, 'T%d' % t), OPS.get(op & 0x1f, 'OP%d' % (op & 0x1f)))


def icrc_of(l3, ipv6):
    """l3: bytes from the IP header to the end of the IBA packet *including* the 4 ICRC bytes."""
    b = bytearray(l3)
    if ipv6:
        b[0] = (b[0] & 0xf0) | 0x0f            # traffic class (high nibble) ...
        b[1] = 0xff; b[2] = 0xff; b[3] = 0xff  # ... low nibble + flow label
        b[7] = 0xff                            # hop limit
        iph = 40
    else:
        iph = (b[0] & 0x0f) * 4
        b[1] = 0xff                            # TOS
        b[8] = 0xff                            # TTL
        b[10] = 0xff; b[11] = 0xff             # header checksum
    b[iph + 6] = 0xff; b[iph + 7] = 0xff       # UDP checksum
    b[iph + 8 + 4] = 0xff                      # BTH resv8a
    return struct.pack('<I', zlib.crc32(b'\xff' * 8 + bytes(b[:-4])))


def packets(path):
    with open(path, 'rb') as f:
        data = f.read()
    magic = data[:4]
    if magic in (b'\xd4\xc3\xb2\xa1', b'\x4d\x3c\xb2\xa1'):
        e = '<'
    elif magic in (b'\xa1\xb2\xc3\xd4', b'\xa1\xb2\x3c\x4d'):
        e = '>'
    else:
        raise SystemExit('%s: not a classic pcap file (pcapng is not supported)' % path)
    linktype = struct.unpack(e + 'I', data[20:24])[0]
    if linktype != 1:
        raise SystemExit('%s: link type %d, expected Ethernet (1)' % (path, linktype))
    off, n = 24, 0
    while off + 16 <= len(data):
        _, _, incl, orig = struct.unpack(e + 'IIII', data[off:off + 16])
        n += 1
        yield n, data[off + 16: off + 16 + incl], orig
        off += 16 + incl


def ipv4_csum_ok(h):
    s = sum(struct.unpack('>%dH' % (len(h) // 2), h))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return s == 0xffff


def check(path, verbose, flows):
    """Counts the good and bad packets of path, and adds them to flows[(src, dst)]."""
    good = bad = 0
    for n, frame, orig in packets(path):
        if len(frame) != orig:
            continue                               # truncated capture
        et, l3off = struct.unpack('>H', frame[12:14])[0], 14
        while et in (0x8100, 0x88a8):              # VLAN tags
            et = struct.unpack('>H', frame[l3off + 2:l3off + 4])[0]; l3off += 4
        if et == 0x0800:
            ip = frame[l3off:]; ihl = (ip[0] & 0x0f) * 4
            if ip[9] != 17: continue
            tot = struct.unpack('>H', ip[2:4])[0]; ip = ip[:tot]; v6 = False
            src = '.'.join(map(str, ip[12:16])); dst = '.'.join(map(str, ip[16:20]))
        elif et == 0x86dd:
            ip = frame[l3off:]; ihl = 40
            if ip[6] != 17: continue
            ip = ip[:40 + struct.unpack('>H', ip[4:6])[0]]; v6 = True
            src = socket.inet_ntop(socket.AF_INET6, ip[8:24]); dst = socket.inet_ntop(socket.AF_INET6, ip[24:40])
        else:
            continue
        dport = struct.unpack('>H', ip[ihl + 2:ihl + 4])[0]
        if dport != 4791:
            continue
        bth = ip[ihl + 8: ihl + 20]
        op, qpn, psn = bth[0], int.from_bytes(bth[5:8], 'big'), int.from_bytes(bth[9:12], 'big')
        want, have = icrc_of(ip, v6), ip[-4:]
        ok = want == have
        if not v6 and not ipv4_csum_ok(bytes(ip[:ihl])):
            ok = False
            print('%s #%-4d %s -> %s bad IPv4 header checksum' % (path.rsplit('/', 1)[-1], n, src, dst))
        good += ok; bad += (not ok)
        f = flows.setdefault((src, dst), [0, 0])
        f[0] += ok; f[1] += (not ok)
        if verbose or not ok:
            print('%s #%-4d %s -> %s %-20s qpn=0x%06x psn=%-8d len=%-5d icrc=%s %s' % (
                path.rsplit('/', 1)[-1], n, src, dst, opname(op), qpn, psn, len(ip) - ihl - 8,
                have.hex(), 'OK' if ok else 'BAD (expected %s)' % want.hex()))
    return good, bad


def main():
    args = sys.argv[1:]
    verbose = '-v' in args
    files = [a for a in args if a != '-v']
    if not files:
        print(__doc__); return 2
    tg = tb = 0
    flows = {}
    for p in files:
        g, b = check(p, verbose, flows)
        tg += g; tb += b
        print('%-40s roce_packets=%-4d icrc_ok=%-4d icrc_bad=%d' % (p.rsplit('/', 1)[-1], g + b, g, b))
    for (src, dst), (g, b) in sorted(flows.items()):
        print('FLOW %s -> %s roce_packets=%d icrc_ok=%d icrc_bad=%d' % (src, dst, g + b, g, b))
    print('TOTAL roce_packets=%d icrc_ok=%d icrc_bad=%d' % (tg + tb, tg, tb))
    return 1 if tb else 0


if __name__ == '__main__':
    sys.exit(main())
