// tc (clsact egress) program for scripts/netns-multipath: one instance per link end. It
// counts the UDP packets that leave on its link for one destination port (RoCE v2's 4791
// unless set), and can drop them all: a path that has failed silently (a gray failure): the
// link stays up, so the kernel's multipath route keeps hashing flows onto it and only the
// transport can notice. (Delay is not done here: this machine's kernel has neither netem nor
// the fq qdisc that would honour a departure time set here; the script puts a user-space
// relay, crates/lab's delay-relay, in a delayed link instead.)
//
// Settings: one entry of `mp_cfg`, written by the script with bpftool; counters: `mp_stats`
// (0: packets seen, 1: bytes seen, 2: packets dropped). Maps are not pinned, so each link
// end's program has its own (the script finds them by the program id).
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct mp_cfg {
    __u32 drop;   // non-zero: drop every matching packet
    __u16 dport;  // 0: every UDP packet
    __u16 pad;
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct mp_cfg);
} mp_cfg SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);  // no atomic add on a shared line per packet
    __uint(max_entries, 3);
    __type(key, __u32);
    __type(value, __u64);
} mp_stats SEC(".maps");

static __always_inline void add(__u32 k, __u64 n)
{
    __u64 *v = bpf_map_lookup_elem(&mp_stats, &k);
    if (v)
        *v += n;
}

SEC("tc")
int mp_link(struct __sk_buff *skb)
{
    __u32 zero = 0;
    struct mp_cfg *c = bpf_map_lookup_elem(&mp_cfg, &zero);
    if (!c)
        return TC_ACT_OK;
    void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
        return TC_ACT_OK;
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > end || ip->protocol != IPPROTO_UDP)
        return TC_ACT_OK;
    struct udphdr *udp = (void *)ip + ip->ihl * 4;
    if ((void *)(udp + 1) > end)
        return TC_ACT_OK;
    if (c->dport && udp->dest != bpf_htons(c->dport))
        return TC_ACT_OK;
    // A GSO batch is one skb here: count its segments, as the receiver will see them.
    __u32 segs = skb->gso_segs ? skb->gso_segs : 1;
    add(0, segs);
    add(1, skb->len);
    if (c->drop) {
        add(2, segs);
        return TC_ACT_SHOT;
    }
    return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
