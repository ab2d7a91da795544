# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The benchmark's PNG: output tok/s (per user and total) and TTFT against concurrency, headless (Agg).

With a previous results file, both runs are drawn (e.g. RDMA against socket transport), one colour each."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type


def plot_sweep(path, series, title):
    """series: [(label, rows)] (rows as benchmark.summarize_level returns them). Writes the PNG at path."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, (ax_tok, ax_ttft) = plt.subplots(1, 2, figsize=(12, 4.8), dpi=110)
    colours = ['tab:blue', 'tab:orange', 'tab:green', 'tab:red']
    levels = sorted(set(r['concurrency'] for unused_label, rows in series for r in rows))
    for (label, rows), colour in zip(series, colours):
        rows = sorted(rows, key=lambda r: r['concurrency'])
        xs = [r['concurrency'] for r in rows]
        ax_tok.plot(xs, [r['total_tok_s'] for r in rows], 'o-', color=colour, label='%s: total' % label)
        ax_tok.plot(xs, [r['per_user_tok_s_median'] for r in rows], 's--', color=colour,
                    label='%s: per user (median)' % label)
        ax_ttft.plot(xs, [r['ttft_ms_median'] for r in rows], 'o-', color=colour, label='%s: median' % label)
        ax_ttft.plot(xs, [r['ttft_ms_p99'] for r in rows], '^:', color=colour, label='%s: p99' % label)
    for ax in (ax_tok, ax_ttft):
        ax.set_xscale('log', base=2)
        ax.set_xticks(levels)
        ax.set_xticklabels([str(c) for c in levels])
        ax.set_xlabel('concurrency (simultaneous requests)')
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    ax_tok.set_ylabel('output throughput (tokens/s)')
    ax_tok.set_title('Output tokens/s against concurrency')
    ax_tok.set_ylim(0, ax_tok.get_ylim()[1] * 1.1)   # headroom: the top point stays inside the frame
    ax_ttft.set_ylabel('time to first token (ms)')
    ax_ttft.set_title('Time to first token against concurrency')
    ax_ttft.set_ylim(0, ax_ttft.get_ylim()[1] * 1.1)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
