#!/usr/bin/env python3
"""Every option a tool accepts is in its manual page, and every option a manual page lists in a
.TP header is one the tool accepts.

For each MAN/<tool>.1 the tool's `--help` is read, then `<tool> <sub> --help` for each subcommand
its help lists (CLI11's layout: option lines start with "  -x,--long" or "  --long"; subcommands sit
under "Subcommands:"). An option is documented when any of its names (short or long) appears in the
tool's page or in MAN/cuda-agent.7 (the options every tool shares) as a whole word, after roff's
escapes are undone. The other way: an option named on the line after a .TP (the page's option
list) must be one of the tool's, so a removed option does not stay documented.

Prints one line per finding ("TOOL SUB: --opt ..."); exit 1 if there are any, 0 if none.
"""
import argparse
import os
import re
import subprocess
import sys

OPTION_LINE = re.compile(r"^\s{2,}(--?[A-Za-z0-9][\w-]*(?:,\s*-[\w-]+)*)")
NAME = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*")


def roff_text(path):
    """The page's text with hyphen and font escapes undone (\\- -> -, \\fB/\\fI/\\fR/\\fP dropped)."""
    text = open(path, encoding="utf-8").read().replace("\\-", "-")
    return re.sub(r"\\f[BIRP]", "", text)


def help_of(binary, args):
    run = subprocess.run([binary] + args + ["--help"], capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        raise SystemExit("%s %s --help: exit %d: %s" % (binary, " ".join(args), run.returncode, run.stderr.strip()))
    return run.stdout


def subcommands(help_text):
    m = re.search(r"^Subcommands:\n((?:  \S.*\n|  {3,}.*\n)+)", help_text, re.M)
    if not m:
        return []
    return [line.split()[0] for line in m.group(1).splitlines() if re.match(r"  \S", line)]


def options(help_text):
    """Each option line's names, e.g. ['-n', '--count']."""
    found = []
    for line in help_text.splitlines():
        m = OPTION_LINE.match(line)
        if m:
            found.append([n.strip() for n in m.group(1).split(",")])
    return found


def mentions(text, name):
    return re.search(r"(?<![\w-])" + re.escape(name) + r"(?![\w-])", text) is not None


def listed_options(page):
    """Options named on the line after each .TP."""
    lines = page.splitlines()
    names = []
    for i, line in enumerate(lines[:-1]):
        if line.startswith(".TP"):
            names += NAME.findall(lines[i + 1])
    return names


def check_tool(tool, binary, page, common):
    findings = []
    top = help_of(binary, [])
    helps = [("-", top)] + [(sub, help_of(binary, [sub])) for sub in subcommands(top)]
    accepted = set()
    for sub, text in helps:
        for names in options(text):
            accepted.update(names)
            if not any(mentions(page, n) or mentions(common, n) for n in names):
                findings.append("%s %s: %s is not in man/%s.1 (nor in cuda-agent.7)" % (tool, sub, ",".join(names), tool))
    for name in sorted(set(listed_options(page))):
        if name not in accepted:
            findings.append("%s: man/%s.1 lists %s, which no --help of %s shows" % (tool, tool, name, tool))
    return findings


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="folder with the tools")
    ap.add_argument("--man", required=True, help="folder with <tool>.1 and cuda-agent.7")
    a = ap.parse_args()
    common = roff_text(os.path.join(a.man, "cuda-agent.7"))
    pages = sorted(f for f in os.listdir(a.man) if f.endswith(".1"))
    if not pages:
        raise SystemExit("no manual pages under " + a.man)
    findings = []
    for f in pages:
        tool = f[:-2]
        findings += check_tool(tool, os.path.join(a.bin, tool), roff_text(os.path.join(a.man, f)), common)
    for line in findings:
        print(line)
    print("%d pages, %d findings" % (len(pages), len(findings)), file=sys.stderr)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
