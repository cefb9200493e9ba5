"""Query text: tables spelled from `names`, extra identifiers checked, never values."""

import pytest

from routerscope.warehouse.sql import named


def test_tables_and_checked_identifiers_are_substituted_and_bound_parameters_left_alone():
    sql = named("q", "SELECT * FROM $decisions JOIN $staging USING (id) WHERE x = {x:String}", staging="db.stage_1")
    assert sql == (
        "/* routerscope:q */\nSELECT * FROM routerscope.decisions JOIN db.stage_1 USING (id) WHERE x = {x:String}\n"
    )


@pytest.mark.parametrize("value", ["t; DROP TABLE x", "a.b.c", "1t", "t'", "", "db.t WHERE 1"])
def test_an_identifier_that_is_not_one_is_refused(value):
    with pytest.raises(ValueError, match="is not an identifier"):
        named("q", "SELECT 1 FROM $t", t=value)
