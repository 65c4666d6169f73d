"""Game analysis (`bin/analyze`): records read, every position searched by our USI engine with MultiPV,
the moves judged, and the findings written as a commented KIF, an evaluation graph and JSON."""
