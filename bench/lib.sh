# Shell helpers shared by the benchmark scripts (sourced, not run): free loopback ports, and
# waiting for a listener.

# free_ports N: the first of N consecutive ports that 127.0.0.1 can bind now, chosen below the
# kernel's ephemeral range, so that no outgoing connection on this machine is given one of them.
free_ports() {
  python3 - "$1" <<'EOF'
import random, socket, sys
n = int(sys.argv[1])
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(1000):
    base = random.randrange(10000, max(10001, low - n))
    socks = []
    try:
        for p in range(base, base + n):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", p))
        print(base)
        break
    except OSError:
        pass
    finally:
        for s in socks:
            s.close()
else:
    sys.exit("no free loopback ports")
EOF
}
listening() { # PORT PID: until something accepts on PORT (at most 10 s), false if PID exits
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
